"""The async node runtime: wires the core to the world through the interfaces in ports."""
