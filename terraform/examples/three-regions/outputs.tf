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
      public_ips         = node.public_ips
      instance_id        = node.instance_id
      instance_ids       = node.instance_ids
      data_volume_id     = node.data_volume_id
      tls_secret_name    = node.tls_secret_name
      tokens_secret_name = node.tokens_secret_name
      keys_secret_name   = node.keys_secret_name
      postgres_endpoint  = node.postgres_endpoint
    }
  }
}
