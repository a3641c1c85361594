output "region" {
  description = "Region of this node."
  value       = var.region
}

output "peer" {
  description = "This node as a peer of the other regions: pass it in their `peers` list."
  value = {
    region  = var.region
    address = "${local.peer_fqdn}:${var.grpc_port}"
    cidr    = "${aws_eip.node.public_ip}/32"
  }
}

output "peer_address" {
  description = "gRPC host:port the other regions dial (a DNS SAN of this node's TLS certificate must be the host)."
  value       = "${local.peer_fqdn}:${var.grpc_port}"
}

output "public_ip" {
  description = "Elastic IP of the node: the source address of its replication and webhook traffic (give it to receivers that allow-list senders)."
  value       = aws_eip.node.public_ip
}

output "http_endpoint" {
  description = "HTTPS URL of this region alone."
  value       = "https://${var.region}.${var.domain_name}"
}

output "lb_arn" {
  description = "ARN of the application load balancer (an anycast endpoint)."
  value       = aws_lb.this.arn
}

output "lb_dns_name" {
  description = "DNS name of the application load balancer (a latency-DNS alias target)."
  value       = aws_lb.this.dns_name
}

output "lb_zone_id" {
  description = "Route 53 zone id of the load balancer's DNS name (for alias records)."
  value       = aws_lb.this.zone_id
}

output "instance_id" {
  description = "EC2 instance id (for Session Manager: aws ssm start-session --target <id>)."
  value       = aws_instance.node.id
}

output "data_volume_id" {
  description = "EBS volume holding data_dir; snapshot it for backups."
  value       = aws_ebs_volume.data.id
}

output "tls_secret_name" {
  description = "Secrets Manager secret to put this node's TLS material in: JSON {cert, key, ca}."
  value       = aws_secretsmanager_secret.tls.name
}

output "tokens_secret_name" {
  description = "Secrets Manager secret to put the API tokens in: JSON [{token, scope}]."
  value       = aws_secretsmanager_secret.tokens.name
}
