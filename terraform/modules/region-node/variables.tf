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
    cidr    = string
  }))
  description = "The other regions' nodes (their modules' `peer` output): region name, gRPC host:port, and the /32 their replication traffic comes from (their Elastic IP)."
  default     = []

  validation {
    condition     = alltrue([for p in var.peers : endswith(p.cidr, "/32") && p.cidr != "0.0.0.0/32"])
    error_message = "Each peer cidr must be one address (/32): the gRPC port is opened to peer regions only."
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

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
