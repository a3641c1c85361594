variable "endpoints" {
  type = map(object({
    lb_dns_name = string
    lb_zone_id  = string
  }))
  description = "Regional application load balancers keyed by AWS region (modules/region-node's lb_dns_name and lb_zone_id outputs)."

  validation {
    condition     = length(var.endpoints) >= 1
    error_message = "At least one region is needed."
  }
}

variable "domain_name" {
  type        = string
  description = "Public hostname that gets one latency record per region; the regional load balancers hold a certificate for it."
}

variable "zone_id" {
  type        = string
  description = "Route 53 public hosted zone of domain_name."
}

variable "health_check_interval_seconds" {
  type        = number
  description = "Seconds between Route 53 health checks of /readyz (10 or 30)."
  default     = 10

  validation {
    condition     = contains([10, 30], var.health_check_interval_seconds)
    error_message = "Route 53 health checks run every 10 or 30 seconds."
  }
}

variable "failure_threshold" {
  type        = number
  description = "Consecutive failed /readyz checks before a region leaves DNS answers."
  default     = 3
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
