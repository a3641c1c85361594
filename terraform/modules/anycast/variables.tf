variable "name" {
  type        = string
  description = "Name of the accelerator."
  default     = "regionsync"
}

variable "endpoints" {
  type = map(object({
    lb_arn = string
  }))
  description = "Regional application load balancers keyed by AWS region (modules/region-node's lb_arn output)."

  validation {
    condition     = length(var.endpoints) >= 1
    error_message = "At least one region is needed."
  }
}

variable "domain_name" {
  type        = string
  description = "Public hostname pointed at the accelerator (alias A record); the regional load balancers hold a certificate for it."
}

variable "zone_id" {
  type        = string
  description = "Route 53 public hosted zone of domain_name."
}

variable "traffic_dial_percentage" {
  type        = map(number)
  description = "Per-region traffic dial (0-100) keyed by region; a region not listed gets 100. Dial a region to 0 to drain it before maintenance."
  default     = {}
}

variable "health_check_interval_seconds" {
  type        = number
  description = "Seconds between Global Accelerator health checks of each endpoint group (10 or 30). For load balancer endpoints the load balancer's own /readyz target health decides."
  default     = 10
}

variable "flow_logs_bucket" {
  type        = string
  description = "S3 bucket for accelerator flow logs; null disables them."
  default     = null
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
