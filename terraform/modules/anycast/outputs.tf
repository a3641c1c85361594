output "ip_addresses" {
  description = "The accelerator's static anycast IPv4 addresses (allow-list or publish these)."
  value       = flatten([for s in aws_globalaccelerator_accelerator.this.ip_sets : s.ip_addresses])
}

output "dns_name" {
  description = "DNS name of the accelerator."
  value       = aws_globalaccelerator_accelerator.this.dns_name
}

output "url" {
  description = "Public HTTPS URL of the platform."
  value       = "https://${var.domain_name}"
}
