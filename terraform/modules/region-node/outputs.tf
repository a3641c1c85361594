output "region" {
  description = "Region of this node."
  value       = var.region
}

output "peer" {
  description = "This node as a peer of the other regions: pass it in their `peers` list."
  value = {
    region  = var.region
    address = "${local.peer_fqdn}:${var.grpc_port}"
    cidrs   = [for eip in aws_eip.node : "${eip.public_ip}/32"]
  }
}

output "peer_address" {
  description = "gRPC host:port the other regions dial (a DNS SAN of this node's TLS certificate must be the host)."
  value       = "${local.peer_fqdn}:${var.grpc_port}"
}

output "public_ip" {
  description = "Elastic IP of the first node instance (all of them: public_ips)."
  value       = aws_eip.node[0].public_ip
}

output "public_ips" {
  description = "Elastic IPs of the node instances: the source addresses of their replication and webhook traffic (give them to receivers that allow-list senders)."
  value       = aws_eip.node[*].public_ip
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
  value       = aws_instance.node[0].id
}

output "instance_ids" {
  description = "EC2 instance ids of every node instance of the region."
  value       = aws_instance.node[*].id
}

output "data_volume_id" {
  description = "EBS volume holding data_dir; snapshot it for backups."
  value       = aws_ebs_volume.data[0].id
}

output "data_volume_ids" {
  description = "EBS volumes holding each instance's data_dir."
  value       = aws_ebs_volume.data[*].id
}

output "postgres_endpoint" {
  description = "host:port of the region's PostgreSQL database, or null without postgres_enabled."
  value       = var.postgres_enabled ? "${aws_db_instance.pg[0].address}:${aws_db_instance.pg[0].port}" : null
}

output "postgres_secret_arn" {
  description = "Secrets Manager secret RDS generated the database password into (JSON {username, password}), or null without postgres_enabled."
  value       = var.postgres_enabled ? aws_db_instance.pg[0].master_user_secret[0].secret_arn : null
}

output "keys_secret_name" {
  description = "Secrets Manager secret to put the region's signing-secret key ring in (lines <id>:<base64 of 32 bytes>), or null without postgres_enabled."
  value       = var.postgres_enabled ? aws_secretsmanager_secret.keys[0].name : null
}

output "tls_secret_name" {
  description = "Secrets Manager secret to put this node's TLS material in: JSON {cert, key, ca}."
  value       = aws_secretsmanager_secret.tls.name
}

output "tokens_secret_name" {
  description = "Secrets Manager secret to put the API tokens in: JSON [{token, scope}]."
  value       = aws_secretsmanager_secret.tokens.name
}
