output "url" {
  description = "Public HTTPS URL of the platform (nearest healthy region)."
  value       = "https://${var.domain_name}"
}

output "anycast_ips" {
  description = "Static anycast IPv4 addresses (routing = \"anycast\" only)."
  value       = var.routing == "anycast" ? module.anycast[0].ip_addresses : []
}

output "regions" {
  description = "Per region: direct URL, peer address, Elastic IP, instance id and the secrets to fill."
  value = {
    for region, node in local.nodes : region => {
      url                = node.http_endpoint
      peer_address       = node.peer_address
      public_ip          = node.public_ip
      instance_id        = node.instance_id
      data_volume_id     = node.data_volume_id
      tls_secret_name    = node.tls_secret_name
      tokens_secret_name = node.tokens_secret_name
    }
  }
}
