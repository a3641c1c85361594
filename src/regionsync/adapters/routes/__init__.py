"""The HTTP API's routers, one module per resource; ``common`` holds what they share."""
