variable "region" {
  type        = string
  description = "AWS region of this node; also the regionsync region name (`region` in node.toml). Must be the region of the aws provider passed to the module."

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,62}$", var.region))
    error_message = "region must match ^[a-z0-9][a-z0-9-]{0,62}$ (as the node's config requires)."
  }
}

variable "name" {
  type        = string
  description = "Name prefix of every resource; the region is appended where names must be unique per account."
  default     = "regionsync"
}

variable "vpc_id" {
  type        = string
  description = "VPC of the node and its load balancer (modules/network makes one)."
}

variable "subnet_ids" {
  type        = list(string)
  description = "Public subnets in at least two availability zones for the load balancer; the node runs in the first."

  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "An application load balancer needs subnets in at least two availability zones."
  }
}

variable "domain_name" {
  type        = string
  description = "Public hostname senders and API clients use (e.g. hooks.example.com); the load balancer's ACM certificate is issued for it and for <region>.<domain_name>."
}

variable "zone_id" {
  type        = string
  description = "Route 53 public hosted zone that holds domain_name: certificate validation, the regional record and the peer record are written there."
}

variable "peer_domain" {
  type        = string
  description = "Domain of the replication (gRPC) names: the node is reachable by its peers as <region>.<peer_domain>, which must be a DNS SAN of its mutual-TLS certificate. Defaults to peers.<domain_name>."
  default     = null
}

variable "peers" {
  type = list(object({
    region  = string
    address = string
    cidrs   = list(string)
  }))
  description = "The other regions' nodes (their modules' `peer` output): region name, gRPC host:port, and the /32s their replication traffic comes from (the Elastic IPs of their node instances)."
  default     = []

  validation {
    condition     = alltrue([for p in var.peers : length(p.cidrs) >= 1 && alltrue([for c in p.cidrs : endswith(c, "/32") && c != "0.0.0.0/32"])])
    error_message = "Each peer cidr must be one address (/32), at least one per peer: the gRPC port is opened to peer regions only."
  }
}

variable "package_spec" {
  type        = string
  description = "pip requirement the node installs at first boot, e.g. \"regionsync==0.1.0\" from your index, a wheel URL, or \"regionsync @ git+https://git.example.com/regionsync.git@v0.1.0\"."

  validation {
    condition     = length(trimspace(var.package_spec)) > 0 && !strcontains(var.package_spec, "'")
    error_message = "package_spec must be a non-empty pip requirement without single quotes."
  }
}

variable "instance_type" {
  type        = string
  description = "EC2 instance type. The default (2 Graviton vCPUs, 4 GiB) matches the 2-core machine our baselines were measured on; see terraform/README.md."
  default     = "c7g.large"
}

variable "ami_id" {
  type        = string
  description = "AMI of the node; null picks the latest Amazon Linux 2023 image for the instance's architecture from the public SSM parameter ami_ssm_parameter."
  default     = null
}

variable "ami_ssm_parameter" {
  type        = string
  description = "Public SSM parameter naming the Amazon Linux 2023 AMI (arm64 for Graviton types, x86_64 otherwise). Used when ami_id is null."
  default     = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64"
}

variable "root_volume_size_gb" {
  type        = number
  description = "Size of the (encrypted) root volume in GiB: OS, Python and the node's virtualenv."
  default     = 16
}

variable "data_volume_size_gb" {
  type        = number
  description = "Size of the encrypted EBS volume mounted at data_dir (the SQLite database) in GiB. It outlives the instance."
  default     = 100
}

variable "data_volume_iops" {
  type        = number
  description = "Provisioned IOPS of the gp3 data volume (3000 is included in the gp3 price). SQLite commits one fsync per transaction."
  default     = 3000
}

variable "data_volume_throughput" {
  type        = number
  description = "Throughput of the gp3 data volume in MiB/s (125 is included in the gp3 price)."
  default     = 125
}

variable "data_dir" {
  type        = string
  description = "Mount point of the data volume and the node's data_dir."
  default     = "/var/lib/regionsync"
}

variable "http_port" {
  type        = number
  description = "Port of the node's HTTP API on the instance (http_listen); open to the load balancer only."
  default     = 8080
}

variable "grpc_port" {
  type        = number
  description = "Port of the node's gRPC replication listener (grpc_listen); open to the peer regions' addresses only."
  default     = 7070
}

variable "log_level" {
  type        = string
  description = "Node log level: debug, info, warning or error."
  default     = "info"

  validation {
    condition     = contains(["debug", "info", "warning", "error"], var.log_level)
    error_message = "log_level must be debug, info, warning or error."
  }
}

variable "delivery_timeout_s" {
  type        = number
  description = "Total deadline of one delivery attempt in seconds ([delivery] timeout_s; at most 60)."
  default     = 15
}

variable "enable_ssm_session_manager" {
  type        = bool
  description = "Attach AmazonSSMManagedInstanceCore so operators get a shell through Session Manager (no SSH port is ever opened)."
  default     = true
}

variable "lb_deletion_protection" {
  type        = bool
  description = "Protect the load balancer from deletion; set false before `terraform destroy`."
  default     = true
}

variable "lb_ssl_policy" {
  type        = string
  description = "TLS policy of the HTTPS listener."
  default     = "ELBSecurityPolicy-TLS13-1-2-2021-06"
}

variable "secret_recovery_window_days" {
  type        = number
  description = "Days a deleted secret can still be restored (0 deletes at once)."
  default     = 7
}

variable "node_count" {
  type        = number
  description = "Node instances in this region (each with its own Elastic IP and data volume, spread over subnet_ids, all behind the load balancer). More than 1 needs postgres_enabled: the processes of a region share its PostgreSQL database (issue 16), while a SQLite file belongs to one instance."
  default     = 1

  validation {
    condition     = var.node_count >= 1 && var.node_count <= 10 && floor(var.node_count) == var.node_count
    error_message = "node_count must be a whole number from 1 to 10."
  }
}

variable "postgres_enabled" {
  type        = bool
  description = "Give the region a managed PostgreSQL database (RDS, encrypted with the region's key, in postgres_subnet_ids, reachable from the node instances only) and render store = \"postgresql://...\" into node.toml instead of the SQLite default. Its password is generated by RDS into a Secrets Manager secret; terraform never sees it."
  default     = false
}

variable "postgres_subnet_ids" {
  type        = list(string)
  description = "Private subnets (no route out of the VPC) in at least two availability zones for the database's subnet group (modules/network's private_subnet_ids). Required when postgres_enabled."
  default     = []
}

variable "postgres_engine_version" {
  type        = string
  description = "PostgreSQL major version of the database (RDS engine_version; minor upgrades are applied in the maintenance window)."
  default     = "16"
}

variable "postgres_instance_class" {
  type        = string
  description = "RDS instance class of the database (2 Graviton vCPUs and 8 GiB by default)."
  default     = "db.m7g.large"
}

variable "postgres_allocated_storage_gb" {
  type        = number
  description = "Initial gp3 storage of the database in GiB; it grows on its own up to postgres_max_allocated_storage_gb."
  default     = 100
}

variable "postgres_max_allocated_storage_gb" {
  type        = number
  description = "Upper bound of the database's storage autoscaling in GiB."
  default     = 1000
}

variable "postgres_multi_az" {
  type        = bool
  description = "Run a synchronous standby in a second zone (failover in about a minute; the node retries an operation that met a lost connection once)."
  default     = true
}

variable "postgres_backup_retention_days" {
  type        = number
  description = "Days of automated backups and point-in-time recovery of the database (1 to 35)."
  default     = 7

  validation {
    condition     = var.postgres_backup_retention_days >= 1 && var.postgres_backup_retention_days <= 35
    error_message = "postgres_backup_retention_days must be 1 to 35 (0 would turn backups off)."
  }
}

variable "postgres_deletion_protection" {
  type        = bool
  description = "Protect the database from deletion; set false before `terraform destroy` (a final snapshot is taken either way)."
  default     = true
}

variable "postgres_pool_max" {
  type        = number
  description = "PostgreSQL connections per node process (store_pool_max in node.toml); node_count times this must stay below the instance class's max_connections."
  default     = 10
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
