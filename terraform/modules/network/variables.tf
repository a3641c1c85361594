variable "name" {
  type        = string
  description = "Name prefix of every resource (and the Name tag)."
  default     = "regionsync"
}

variable "cidr_block" {
  type        = string
  description = "IPv4 CIDR of the region's VPC. Give every region a distinct range so VPC peering stays possible later."
  default     = "10.64.0.0/16"

  validation {
    condition     = can(cidrnetmask(var.cidr_block))
    error_message = "cidr_block must be an IPv4 CIDR such as 10.64.0.0/16."
  }
}

variable "availability_zone_suffixes" {
  type        = list(string)
  description = "Availability zones of the public subnets, as suffixes of the region name (\"a\", \"b\" -> us-east-1a, us-east-1b); the private subnets use the same zones. The load balancer and a PostgreSQL subnet group need two."
  default     = ["a", "b"]

  validation {
    condition     = length(var.availability_zone_suffixes) >= 2
    error_message = "Give at least two zones: an application load balancer spans two."
  }
}

variable "flow_log_retention_days" {
  type        = number
  description = "Days to keep VPC flow logs in CloudWatch Logs."
  default     = 365
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
