# Latency-based DNS: one alias record per region for the same name, each with a Route 53
# health check of that region's /readyz. Route 53 answers each resolver with the region of
# lowest measured latency among the healthy ones; a failed region drops out of answers
# after failure_threshold checks, and clients follow once their cached answer expires
# (alias records to a load balancer carry a 60 s TTL).

resource "aws_route53_health_check" "region" {
  for_each          = var.endpoints
  type              = "HTTPS"
  fqdn              = each.value.lb_dns_name
  port              = 443
  resource_path     = "/readyz"
  request_interval  = var.health_check_interval_seconds
  failure_threshold = var.failure_threshold
  measure_latency   = true
  regions           = ["us-east-1", "eu-west-1", "ap-southeast-1"]
  tags              = merge(var.tags, { Name = "regionsync-${each.key}" })
}

resource "aws_route53_record" "region" {
  #checkov:skip=CKV2_AWS_23:The alias target is the regional load balancer made by modules/region-node and passed in through var.endpoints; checkov cannot follow a map input to it.
  for_each        = var.endpoints
  zone_id         = var.zone_id
  name            = var.domain_name
  type            = "A"
  set_identifier  = each.key
  health_check_id = aws_route53_health_check.region[each.key].id

  latency_routing_policy {
    region = each.key
  }

  alias {
    name                   = each.value.lb_dns_name
    zone_id                = each.value.lb_zone_id
    evaluate_target_health = true
  }
}
