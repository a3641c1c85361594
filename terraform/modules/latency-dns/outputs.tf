output "url" {
  description = "Public HTTPS URL of the platform."
  value       = "https://${var.domain_name}"
}

output "health_check_ids" {
  description = "Route 53 health check id per region (attach CloudWatch alarms to these)."
  value       = { for r, hc in aws_route53_health_check.region : r => hc.id }
}
