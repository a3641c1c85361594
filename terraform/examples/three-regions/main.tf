# Three regionsync regions wired together: us-east-1, eu-central-1 and ap-southeast-1.
# Each region gets its own VPC and node; each node gets the other two as peers (their
# gRPC names, and their Elastic IPs as /32s in its security group); var.routing puts
# either a Global Accelerator (anycast) or latency-based DNS in front of all three.
# To add a region: a provider alias, a network and a node module below, the new node in
# every other node's peers, and the new node in local.nodes (terraform/README.md).

provider "aws" {
  alias  = "us_east_1"
  region = "us-east-1"
  default_tags {
    tags = var.tags
  }
}

provider "aws" {
  alias  = "eu_central_1"
  region = "eu-central-1"
  default_tags {
    tags = var.tags
  }
}

provider "aws" {
  alias  = "ap_southeast_1"
  region = "ap-southeast-1"
  default_tags {
    tags = var.tags
  }
}

# -- us-east-1 ---------------------------------------------------------------------------

module "network_us_east_1" {
  source     = "../../modules/network"
  providers  = { aws = aws.us_east_1 }
  name       = var.name
  cidr_block = "10.64.0.0/16"
}

module "us_east_1" {
  source                 = "../../modules/region-node"
  providers              = { aws = aws.us_east_1 }
  region                 = "us-east-1"
  name                   = var.name
  vpc_id                 = module.network_us_east_1.vpc_id
  subnet_ids             = module.network_us_east_1.public_subnet_ids
  node_count             = var.node_count
  postgres_enabled       = var.postgres_enabled
  postgres_subnet_ids    = module.network_us_east_1.private_subnet_ids
  domain_name            = var.domain_name
  zone_id                = var.zone_id
  package_spec           = var.package_spec
  instance_type          = var.instance_type
  data_volume_size_gb    = var.data_volume_size_gb
  lb_deletion_protection = var.lb_deletion_protection
  peers                  = [module.eu_central_1.peer, module.ap_southeast_1.peer]
}

# -- eu-central-1 ------------------------------------------------------------------------

module "network_eu_central_1" {
  source     = "../../modules/network"
  providers  = { aws = aws.eu_central_1 }
  name       = var.name
  cidr_block = "10.65.0.0/16"
}

module "eu_central_1" {
  source                 = "../../modules/region-node"
  providers              = { aws = aws.eu_central_1 }
  region                 = "eu-central-1"
  name                   = var.name
  vpc_id                 = module.network_eu_central_1.vpc_id
  subnet_ids             = module.network_eu_central_1.public_subnet_ids
  node_count             = var.node_count
  postgres_enabled       = var.postgres_enabled
  postgres_subnet_ids    = module.network_eu_central_1.private_subnet_ids
  domain_name            = var.domain_name
  zone_id                = var.zone_id
  package_spec           = var.package_spec
  instance_type          = var.instance_type
  data_volume_size_gb    = var.data_volume_size_gb
  lb_deletion_protection = var.lb_deletion_protection
  peers                  = [module.us_east_1.peer, module.ap_southeast_1.peer]
}

# -- ap-southeast-1 ----------------------------------------------------------------------

module "network_ap_southeast_1" {
  source     = "../../modules/network"
  providers  = { aws = aws.ap_southeast_1 }
  name       = var.name
  cidr_block = "10.66.0.0/16"
}

module "ap_southeast_1" {
  source                 = "../../modules/region-node"
  providers              = { aws = aws.ap_southeast_1 }
  region                 = "ap-southeast-1"
  name                   = var.name
  vpc_id                 = module.network_ap_southeast_1.vpc_id
  subnet_ids             = module.network_ap_southeast_1.public_subnet_ids
  node_count             = var.node_count
  postgres_enabled       = var.postgres_enabled
  postgres_subnet_ids    = module.network_ap_southeast_1.private_subnet_ids
  domain_name            = var.domain_name
  zone_id                = var.zone_id
  package_spec           = var.package_spec
  instance_type          = var.instance_type
  data_volume_size_gb    = var.data_volume_size_gb
  lb_deletion_protection = var.lb_deletion_protection
  peers                  = [module.us_east_1.peer, module.eu_central_1.peer]
}

# -- front door --------------------------------------------------------------------------

locals {
  nodes = {
    "us-east-1"      = module.us_east_1
    "eu-central-1"   = module.eu_central_1
    "ap-southeast-1" = module.ap_southeast_1
  }
}

module "anycast" {
  count       = var.routing == "anycast" ? 1 : 0
  source      = "../../modules/anycast"
  providers   = { aws = aws.us_east_1 }
  name        = var.name
  domain_name = var.domain_name
  zone_id     = var.zone_id
  endpoints   = { for region, node in local.nodes : region => { lb_arn = node.lb_arn } }
}

module "latency_dns" {
  count       = var.routing == "latency-dns" ? 1 : 0
  source      = "../../modules/latency-dns"
  providers   = { aws = aws.us_east_1 }
  domain_name = var.domain_name
  zone_id     = var.zone_id
  endpoints = {
    for region, node in local.nodes : region => {
      lb_dns_name = node.lb_dns_name
      lb_zone_id  = node.lb_zone_id
    }
  }
}
