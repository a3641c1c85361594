variable "routing" {
  type        = string
  description = "How senders reach the nearest healthy region: \"anycast\" (Global Accelerator, two static IPs, failover in seconds) or \"latency-dns\" (Route 53 latency records with /readyz health checks, failover bounded by DNS caching)."
  default     = "anycast"

  validation {
    condition     = contains(["anycast", "latency-dns"], var.routing)
    error_message = "routing must be \"anycast\" or \"latency-dns\"."
  }
}

variable "domain_name" {
  type        = string
  description = "Public hostname of the platform, e.g. hooks.example.com; must sit in zone_id."
}

variable "zone_id" {
  type        = string
  description = "Id of the Route 53 public hosted zone holding domain_name (certificates, regional and peer records, and the latency records)."
}

variable "package_spec" {
  type        = string
  description = "pip requirement every node installs, e.g. \"regionsync @ git+https://git.example.com/regionsync.git@v0.1.0\" or a wheel URL."
}

variable "name" {
  type        = string
  description = "Name prefix of every resource."
  default     = "regionsync"
}

variable "instance_type" {
  type        = string
  description = "EC2 instance type of every node (Graviton by default; pick an x86_64 type together with the x86_64 AMI parameter)."
  default     = "c7g.large"
}

variable "data_volume_size_gb" {
  type        = number
  description = "Size of each node's encrypted data volume in GiB."
  default     = 100
}

variable "lb_deletion_protection" {
  type        = bool
  description = "Protect the regional load balancers from deletion; set false before `terraform destroy`."
  default     = true
}

variable "postgres_enabled" {
  type        = bool
  description = "Give every region a managed PostgreSQL database (RDS in the network's private subnets) as its store instead of SQLite on the data volume (region-node's postgres_enabled)."
  default     = false
}

variable "node_count" {
  type        = number
  description = "Node instances per region (more than 1 needs postgres_enabled)."
  default     = 1
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource in every region."
  default     = { project = "regionsync" }
}
