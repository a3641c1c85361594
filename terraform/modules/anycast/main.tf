# Anycast front door: one AWS Global Accelerator (two static anycast IPv4 addresses) with a
# TCP 443 listener and one endpoint group per region holding that region's load balancer.
# Each client connection enters the AWS network at the nearest edge and goes to the
# nearest region whose load balancer reports a healthy /readyz target; a failed region's
# traffic moves to the next nearest within seconds, with no DNS caching in the way.
# Global Accelerator is a global service managed from us-west-2; the AWS provider routes
# its API calls there whatever region the passed provider is configured for.

resource "aws_globalaccelerator_accelerator" "this" {
  #checkov:skip=CKV_AWS_75:Flow logs are optional here (var.flow_logs_bucket) because they need an S3 bucket the operator owns; the regional load balancers and VPC flow logs already record every connection.
  name            = var.name
  ip_address_type = "IPV4"
  enabled         = true
  tags            = var.tags

  attributes {
    flow_logs_enabled   = var.flow_logs_bucket != null
    flow_logs_s3_bucket = var.flow_logs_bucket
    flow_logs_s3_prefix = var.flow_logs_bucket != null ? "${var.name}/" : null
  }
}

resource "aws_globalaccelerator_listener" "https" {
  accelerator_arn = aws_globalaccelerator_accelerator.this.id
  protocol        = "TCP"
  client_affinity = "NONE" # the nearest healthy region for every connection

  port_range {
    from_port = 443
    to_port   = 443
  }
}

resource "aws_globalaccelerator_endpoint_group" "region" {
  for_each                      = var.endpoints
  listener_arn                  = aws_globalaccelerator_listener.https.id
  endpoint_group_region         = each.key
  traffic_dial_percentage       = lookup(var.traffic_dial_percentage, each.key, 100)
  health_check_protocol         = "HTTPS"
  health_check_port             = 443
  health_check_path             = "/readyz"
  health_check_interval_seconds = var.health_check_interval_seconds
  threshold_count               = 3

  endpoint_configuration {
    endpoint_id                    = each.value.lb_arn
    weight                         = 100
    client_ip_preservation_enabled = true
  }
}

resource "aws_route53_record" "apex_v4" {
  zone_id = var.zone_id
  name    = var.domain_name
  type    = "A"

  alias {
    name                   = aws_globalaccelerator_accelerator.this.dns_name
    zone_id                = aws_globalaccelerator_accelerator.this.hosted_zone_id
    evaluate_target_health = false
  }
}
