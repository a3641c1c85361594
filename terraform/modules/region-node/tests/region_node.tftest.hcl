# `terraform test` of the region-node module, offline: the AWS provider is mocked (values
# known at plan), so it checks what terraform itself decides and renders: node_count and
# its precondition, the PostgreSQL option's node.toml and service arguments, one gRPC rule
# per peer instance address. Run: make tf-test (needs terraform >= 1.11 and the AWS
# provider, from the registry or a local -plugin-dir).

mock_provider "aws" {
  override_during = plan
  mock_resource "aws_lb" {
    defaults = { arn = "arn:aws:elasticloadbalancing:us-east-1::loadbalancer/app/x/1" }
  }
  mock_resource "aws_lb_target_group" {
    defaults = { arn = "arn:aws:elasticloadbalancing:us-east-1::targetgroup/x/1" }
  }
  mock_resource "aws_kms_key" {
    defaults = { arn = "arn:aws:kms:us-east-1::key/1" }
  }
  mock_resource "aws_iam_role" {
    defaults = { arn = "arn:aws:iam:::role/x" }
  }
  mock_resource "aws_iam_instance_profile" {
    defaults = { arn = "arn:aws:iam:::instance-profile/x" }
  }
  mock_resource "aws_secretsmanager_secret" {
    defaults = { arn = "arn:aws:secretsmanager:us-east-1::secret:x" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_resource "aws_acm_certificate" {
    defaults = { domain_validation_options = [], arn = "arn:aws:acm:us-east-1::certificate/x" }
  }
  mock_resource "aws_acm_certificate_validation" {
    defaults = { certificate_arn = "arn:aws:acm:us-east-1::certificate/x" }
  }
  mock_data "aws_iam_policy_document" {
    defaults = { json = "{}" }
  }
  mock_data "aws_subnet" {
    defaults = { availability_zone = "us-east-1a" }
  }
  mock_resource "aws_db_instance" {
    defaults = {
      address            = "db.example.internal"
      port               = 5432
      master_user_secret = [{ secret_arn = "arn:aws:secretsmanager:us-east-1::secret:rds", kms_key_id = "k", secret_status = "active" }]
    }
  }
  mock_resource "aws_ebs_volume" {
    defaults = { id = "vol-0123456789abcdef0" }
  }
}

variables {
  region       = "us-east-1"
  vpc_id       = "vpc-1"
  subnet_ids   = ["subnet-a", "subnet-b"]
  domain_name  = "hooks.example.com"
  zone_id      = "Z1"
  package_spec = "regionsync==0.1.0"
  ami_id       = "ami-x"
  peers        = [{ region = "eu-central-1", address = "eu-central-1.peers.hooks.example.com:7070", cidrs = ["203.0.113.10/32", "203.0.113.11/32"] }]
}

run "sqlite_default" {
  command = plan
  assert {
    condition     = length(aws_instance.node) == 1 && length(aws_db_instance.pg) == 0
    error_message = "one instance, no database"
  }
  assert {
    condition     = !strcontains(local.node_toml, "store =")
    error_message = "SQLite: no store line"
  }
  assert {
    condition     = length(aws_vpc_security_group_ingress_rule.node_grpc_from_peers) == 2
    error_message = "one gRPC rule per peer address"
  }
}

run "two_nodes_need_postgres" {
  command = plan
  variables {
    node_count = 2
  }
  expect_failures = [aws_instance.node]
}

run "postgres_two_nodes" {
  command = plan
  variables {
    node_count          = 2
    postgres_enabled    = true
    postgres_subnet_ids = ["subnet-c", "subnet-d"]
  }
  assert {
    condition     = length(aws_instance.node) == 2 && length(aws_db_instance.pg) == 1
    error_message = "two instances, one database"
  }
  assert {
    condition     = strcontains(local.node_toml, "store = \"postgresql://regionsync@db.example.internal:5432/regionsync?sslmode=require\"")
    error_message = local.node_toml
  }
  assert {
    condition     = strcontains(local.node_toml, "[secrets]\nkey_file = \"/etc/regionsync/secrets.keys\"")
    error_message = "the key ring file every instance shares"
  }
  assert {
    condition     = length(local.user_data) == 2 && strcontains(local.user_data[1], "regionsync-pgpass.timer")
    error_message = "one user data per instance, with the password refresh timer"
  }
  assert {
    condition     = alltrue([for u in local.user_data : length(u) < 16384])
    error_message = "EC2 refuses user data over 16 KB"
  }
  assert {
    condition     = strcontains(local.service_unit, "--db-secret arn:aws:secretsmanager:us-east-1::secret:rds --pgpass /etc/regionsync/pgpass")
    error_message = local.service_unit
  }
}

run "postgres_needs_private_subnets" {
  command = plan
  variables {
    postgres_enabled = true
  }
  expect_failures = [aws_db_subnet_group.pg]
}
