# One regionsync region: node_count EC2 instances (default 1), each with an Elastic IP
# and an encrypted EBS volume for data_dir that outlives it, an HTTPS application load
# balancer in front of the HTTP API (health check /readyz), security groups (HTTP from
# the load balancer only, gRPC from the peer regions' /32s only), two Secrets Manager
# secrets (TLS material, API tokens) whose values terraform never sees, a minimal
# instance role, and optionally (postgres_enabled) a managed PostgreSQL database (RDS)
# that the region's instances share, whose password RDS generates into a secret.

data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

# Instance i runs in subnet_ids[i % length(subnet_ids)].
data "aws_subnet" "node" {
  count = length(var.subnet_ids)
  id    = var.subnet_ids[count.index]
}

data "aws_ssm_parameter" "ami" {
  count = var.ami_id == null ? 1 : 0
  name  = var.ami_ssm_parameter
}

locals {
  id          = "${var.name}-${var.region}"
  account_id  = data.aws_caller_identity.current.account_id
  partition   = data.aws_partition.current.partition
  peer_domain = coalesce(var.peer_domain, "peers.${var.domain_name}")
  peer_fqdn   = "${var.region}.${local.peer_domain}"
  ami_id      = var.ami_id != null ? var.ami_id : nonsensitive(data.aws_ssm_parameter.ami[0].value)

  # one gRPC ingress rule per peer instance address, keyed by region and index (known at
  # plan time, unlike the addresses): { "eu-central-1/0" = { region, cidr } }
  peer_sources = merge([for p in var.peers : {
    for i, cidr in p.cidrs : "${p.region}/${i}" => { region = p.region, cidr = cidr }
  }]...)

  venv       = "/opt/regionsync/venv"
  config_dir = "/etc/regionsync"
  tls_dir    = "/etc/regionsync/tls"
  pgpass     = "/etc/regionsync/pgpass"
  keys_file  = "/etc/regionsync/secrets.keys"
  db_port    = 5432

  # the node.toml lines of the PostgreSQL option: one entry when enabled, none otherwise.
  # No password: libpq reads it from PGPASSFILE (written from the RDS secret at start).
  postgres_toml = [for db in aws_db_instance.pg : {
    url      = "postgresql://${db.username}@${db.address}:${db.port}/${db.db_name}?sslmode=require"
    pool_max = var.postgres_pool_max
    key_file = local.keys_file
  }]
  # regionsync-secrets arguments of the PostgreSQL option: the signing-secret key ring all
  # instances of the region share, and the database password
  db_secret_args = join("", [for db in aws_db_instance.pg : join(" ", [
    "", "--keys-secret", aws_secretsmanager_secret.keys[0].name, "--keys-file", local.keys_file,
    "--db-secret", db.master_user_secret[0].secret_arn, "--pgpass", local.pgpass,
  ])])

  node_toml = templatefile("${path.module}/templates/node.toml.tftpl", {
    region             = var.region
    data_dir           = var.data_dir
    http_port          = var.http_port
    grpc_port          = var.grpc_port
    log_level          = var.log_level
    delivery_timeout_s = var.delivery_timeout_s
    tls_dir            = local.tls_dir
    peers              = [for p in var.peers : { region = p.region, address = p.address }]
    postgres           = local.postgres_toml
  })

  service_unit = templatefile("${path.module}/templates/regionsync.service.tftpl", {
    region           = var.region
    data_dir         = var.data_dir
    venv             = local.venv
    config_dir       = local.config_dir
    tls_dir          = local.tls_dir
    tls_secret_id    = aws_secretsmanager_secret.tls.name
    tokens_secret_id = aws_secretsmanager_secret.tokens.name
    db_secret_args   = local.db_secret_args
    pgpass           = local.pgpass
  })

  # one boot script per instance: each mounts its own data volume
  bootstrap = [for v in aws_ebs_volume.data : templatefile("${path.module}/templates/bootstrap.sh.tftpl", {
    data_dir      = var.data_dir
    volume_id     = v.id
    volume_serial = replace(v.id, "-", "")
    venv          = local.venv
    config_dir    = local.config_dir
    tls_dir       = local.tls_dir
    package_spec  = var.package_spec
  })]

  # RDS rotates the password it generated (every 7 days by default): a timer writes it to
  # PGPASSFILE again every 5 minutes, and libpq reads that file at every new connection.
  pgpass_units = var.postgres_enabled ? [
    {
      path        = "/etc/systemd/system/regionsync-pgpass.service"
      permissions = "0644"
      content     = <<-EOT
        [Unit]
        Description=regionsync: refresh the PostgreSQL password file from Secrets Manager
        [Service]
        Type=oneshot
        ExecStart=${local.venv}/bin/python /usr/local/libexec/regionsync-secrets --region ${var.region} --only-db${local.db_secret_args} --owner regionsync
      EOT
    },
    {
      path        = "/etc/systemd/system/regionsync-pgpass.timer"
      permissions = "0644"
      content     = <<-EOT
        [Unit]
        Description=regionsync: refresh the PostgreSQL password file every 5 minutes
        [Timer]
        OnBootSec=5min
        OnUnitActiveSec=5min
        [Install]
        WantedBy=timers.target
      EOT
    },
  ] : []

  # cloud-init user data per instance: files and commands, no secret anywhere.
  user_data = [for boot in local.bootstrap : join("\n", ["#cloud-config", yamlencode({
    write_files = concat([
      { path = "${local.config_dir}/node.base.toml", permissions = "0644", content = local.node_toml },
      { path = "/etc/systemd/system/regionsync.service", permissions = "0644", content = local.service_unit },
      { path = "/usr/local/libexec/regionsync-secrets", permissions = "0755", content = file("${path.module}/files/regionsync-secrets") },
      { path = "/usr/local/libexec/regionsync-bootstrap", permissions = "0700", content = boot },
    ], local.pgpass_units)
    runcmd = concat(
      [["/usr/local/libexec/regionsync-bootstrap"]],
      var.postgres_enabled ? [["systemctl", "enable", "--now", "regionsync-pgpass.timer"]] : [],
    )
  })])]
}

# -- encryption key ----------------------------------------------------------------------

data "aws_iam_policy_document" "key" {
  #checkov:skip=CKV_AWS_109:This is a KMS key policy: "*" is the key it is attached to, and the only principal is the account itself, which delegates to IAM (the instance role may only decrypt through Secrets Manager).
  #checkov:skip=CKV_AWS_111:KMS key policy: "*" is the key itself; access goes to the account root only, so IAM policies decide who uses the key.
  #checkov:skip=CKV_AWS_356:KMS key policy: a key policy's resource can only be "*" (the key itself).
  statement {
    sid       = "AccountAdministers"
    actions   = ["kms:*"]
    resources = ["*"] # in a key policy "*" is the key itself
    principals {
      type        = "AWS"
      identifiers = ["arn:${local.partition}:iam::${local.account_id}:root"]
    }
  }
}

resource "aws_kms_key" "node" {
  description             = "${local.id}: data volume, root volume and secrets"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.key.json
  tags                    = var.tags
}

resource "aws_kms_alias" "node" {
  name          = "alias/${local.id}"
  target_key_id = aws_kms_key.node.key_id
}

# -- secrets (created empty: values are put with the AWS CLI, never through terraform) --

resource "aws_secretsmanager_secret" "tls" {
  #checkov:skip=CKV2_AWS_57:Certificates are rotated by re-issuing from the operator's CA (terraform/README.md); there is no Lambda to rotate them.
  name                    = "${var.name}/${var.region}/tls"
  description             = "regionsync ${var.region}: mutual-TLS material for replication, JSON {cert, key, ca} in PEM"
  kms_key_id              = aws_kms_key.node.arn
  recovery_window_in_days = var.secret_recovery_window_days
  tags                    = var.tags
}

resource "aws_secretsmanager_secret" "keys" {
  #checkov:skip=CKV2_AWS_57:The key ring is rotated by the operator (terraform/README.md): a new key is put first in the list and the old ones stay to read what they sealed.
  count                   = var.postgres_enabled ? 1 : 0
  name                    = "${var.name}/${var.region}/keys"
  description             = "regionsync ${var.region}: key ring sealing signing secrets at rest, shared by the region's instances; lines <id>:<base64 of 32 bytes>, current first"
  kms_key_id              = aws_kms_key.node.arn
  recovery_window_in_days = var.secret_recovery_window_days
  tags                    = var.tags
}

resource "aws_secretsmanager_secret" "tokens" {
  #checkov:skip=CKV2_AWS_57:API tokens are issued to clients and rotated by the operator (terraform/README.md), not by a Lambda.
  name                    = "${var.name}/${var.region}/tokens"
  description             = "regionsync ${var.region}: API tokens, JSON [{token, scope}]"
  kms_key_id              = aws_kms_key.node.arn
  recovery_window_in_days = var.secret_recovery_window_days
  tags                    = var.tags
}

# -- instance role: read its two secrets, nothing else (plus Session Manager if wanted) -

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "node" {
  statement {
    sid     = "ReadOwnSecrets"
    actions = ["secretsmanager:GetSecretValue"]
    # TLS, tokens and, with the PostgreSQL option, the key ring and the database password
    resources = concat(
      [aws_secretsmanager_secret.tls.arn, aws_secretsmanager_secret.tokens.arn],
      [for k in aws_secretsmanager_secret.keys : k.arn],
      [for db in aws_db_instance.pg : db.master_user_secret[0].secret_arn],
    )
  }
  statement {
    sid       = "DecryptOwnSecrets"
    actions   = ["kms:Decrypt"]
    resources = [aws_kms_key.node.arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${var.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "node" {
  name_prefix        = "${var.name}-node-"
  description        = "regionsync node in ${var.region}"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy" "node" {
  name   = "read-secrets"
  role   = aws_iam_role.node.id
  policy = data.aws_iam_policy_document.node.json
}

resource "aws_iam_role_policy_attachment" "ssm" {
  count      = var.enable_ssm_session_manager ? 1 : 0
  role       = aws_iam_role.node.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "node" {
  name_prefix = "${var.name}-node-"
  role        = aws_iam_role.node.name
  tags        = var.tags
}

# -- security groups ---------------------------------------------------------------------

resource "aws_security_group" "lb" {
  name_prefix = "${var.name}-lb-"
  description = "regionsync ${var.region} load balancer: HTTPS from senders and clients"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${local.id}-lb" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "lb_https_v4" {
  security_group_id = aws_security_group.lb.id
  description       = "HTTPS from anywhere: webhook senders and API clients"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_vpc_security_group_egress_rule" "lb_to_node" {
  security_group_id            = aws_security_group.lb.id
  description                  = "To the node's HTTP API"
  ip_protocol                  = "tcp"
  from_port                    = var.http_port
  to_port                      = var.http_port
  referenced_security_group_id = aws_security_group.node.id
}

resource "aws_security_group" "node" {
  name_prefix = "${var.name}-node-"
  description = "regionsync ${var.region} node: HTTP from its load balancer, gRPC from peer regions"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${local.id}-node" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "node_http_from_lb" {
  security_group_id            = aws_security_group.node.id
  description                  = "HTTP API from the load balancer only"
  ip_protocol                  = "tcp"
  from_port                    = var.http_port
  to_port                      = var.http_port
  referenced_security_group_id = aws_security_group.lb.id
}

resource "aws_vpc_security_group_ingress_rule" "node_grpc_from_peers" {
  for_each          = local.peer_sources
  security_group_id = aws_security_group.node.id
  description       = "gRPC replication from ${each.value.region}"
  ip_protocol       = "tcp"
  from_port         = var.grpc_port
  to_port           = var.grpc_port
  cidr_ipv4         = each.value.cidr
}

resource "aws_vpc_security_group_egress_rule" "node_out" {
  #checkov:skip=CKV_AWS_382:The node delivers webhooks to any endpoint URL (any host, any port) and dials its peers; the destination guard in the node refuses private and metadata addresses.
  security_group_id = aws_security_group.node.id
  description       = "Webhook deliveries, peer replication, Secrets Manager, package install"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

# -- the node ----------------------------------------------------------------------------

resource "aws_ebs_volume" "data" {
  count             = var.node_count
  availability_zone = data.aws_subnet.node[count.index % length(var.subnet_ids)].availability_zone
  type              = "gp3"
  size              = var.data_volume_size_gb
  iops              = var.data_volume_iops
  throughput        = var.data_volume_throughput
  encrypted         = true
  kms_key_id        = aws_kms_key.node.arn
  final_snapshot    = true
  tags              = merge(var.tags, { Name = "${local.id}-data-${count.index}" })
}

resource "aws_instance" "node" {
  count                       = var.node_count
  ami                         = local.ami_id
  instance_type               = var.instance_type
  subnet_id                   = data.aws_subnet.node[count.index % length(var.subnet_ids)].id
  vpc_security_group_ids      = [aws_security_group.node.id]
  iam_instance_profile        = aws_iam_instance_profile.node.name
  associate_public_ip_address = false # public address: the Elastic IP below
  ebs_optimized               = true
  monitoring                  = true
  user_data                   = local.user_data[count.index]
  user_data_replace_on_change = true

  lifecycle {
    precondition {
      condition     = var.node_count == 1 || var.postgres_enabled
      error_message = "node_count > 1 needs postgres_enabled = true: the instances of a region share one PostgreSQL database, while a SQLite file belongs to one instance."
    }
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type           = "gp3"
    volume_size           = var.root_volume_size_gb
    encrypted             = true
    kms_key_id            = aws_kms_key.node.arn
    delete_on_termination = true
  }

  tags = merge(var.tags, { Name = var.node_count == 1 ? local.id : "${local.id}-${count.index}" })
}

resource "aws_volume_attachment" "data" {
  count                          = var.node_count
  device_name                    = "/dev/sdf"
  volume_id                      = aws_ebs_volume.data[count.index].id
  instance_id                    = aws_instance.node[count.index].id
  stop_instance_before_detaching = true # SQLite sees a clean shutdown before the disk goes
}

# Allocated independently of the instance, so peers can be wired to it before the
# instance exists and it survives instance replacement.
resource "aws_eip" "node" {
  count  = var.node_count
  domain = "vpc"
  tags   = merge(var.tags, { Name = var.node_count == 1 ? local.id : "${local.id}-${count.index}" })
}

resource "aws_eip_association" "node" {
  count         = var.node_count
  allocation_id = aws_eip.node[count.index].id
  instance_id   = aws_instance.node[count.index].id
}

# -- DNS and certificate -----------------------------------------------------------------

resource "aws_route53_record" "peer" {
  zone_id = var.zone_id
  name    = local.peer_fqdn
  type    = "A"
  ttl     = 60
  records = aws_eip.node[*].public_ip # every instance of the region
}

resource "aws_acm_certificate" "lb" {
  domain_name               = var.domain_name
  subject_alternative_names = ["${var.region}.${var.domain_name}"]
  validation_method         = "DNS"
  tags                      = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_route53_record" "cert_validation" {
  for_each = {
    for o in aws_acm_certificate.lb.domain_validation_options : o.domain_name => {
      name   = o.resource_record_name
      type   = o.resource_record_type
      record = o.resource_record_value
    }
  }
  zone_id         = var.zone_id
  name            = each.value.name
  type            = each.value.type
  ttl             = 300
  records         = [each.value.record]
  allow_overwrite = true # ACM asks every region for the same record for the same name
}

resource "aws_acm_certificate_validation" "lb" {
  certificate_arn         = aws_acm_certificate.lb.arn
  validation_record_fqdns = [for r in aws_route53_record.cert_validation : r.fqdn]
}

# -- load balancer -----------------------------------------------------------------------

resource "aws_lb" "this" {
  #checkov:skip=CKV_AWS_91:Access logs need an S3 bucket with a bucket policy per region, which belongs to the operator's logging setup; the VPC flow logs record every connection meanwhile. Add access_logs when your audit needs them.
  #checkov:skip=CKV2_AWS_28:WAF is left to the operator: the AWS common rule set blocks request bodies over 8 KB while webhook payloads go up to 256 KiB, and the node enforces its own payload limit, auth and backpressure.
  #checkov:skip=CKV2_AWS_76:Same as CKV2_AWS_28 (no WAF attached, so no Log4j rule to add); the node is Python.
  name_prefix                = "rsync-"
  internal                   = false
  load_balancer_type         = "application"
  security_groups            = [aws_security_group.lb.id]
  subnets                    = var.subnet_ids
  drop_invalid_header_fields = true
  enable_deletion_protection = var.lb_deletion_protection
  idle_timeout               = 60
  tags                       = merge(var.tags, { Name = local.id })
}

resource "aws_lb_target_group" "node" {
  #checkov:skip=CKV_AWS_378:TLS ends at the load balancer; the hop to the node stays inside the VPC, reachable from the load balancer's security group only.
  name_prefix          = "rsync-"
  port                 = var.http_port
  protocol             = "HTTP"
  vpc_id               = var.vpc_id
  target_type          = "instance"
  deregistration_delay = 30

  health_check {
    path                = "/readyz"
    port                = "traffic-port"
    protocol            = "HTTP"
    matcher             = "200"
    interval            = 10
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }

  tags = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_lb_target_group_attachment" "node" {
  count            = var.node_count
  target_group_arn = aws_lb_target_group.node.arn
  target_id        = aws_instance.node[count.index].id
  port             = var.http_port
}

resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.this.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = var.lb_ssl_policy
  certificate_arn   = aws_acm_certificate_validation.lb.certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.node.arn
  }
}

# <region>.<domain_name>: reach one region directly (operations, debugging, pinning).
resource "aws_route53_record" "regional" {
  zone_id = var.zone_id
  name    = "${var.region}.${var.domain_name}"
  type    = "A"

  alias {
    name                   = aws_lb.this.dns_name
    zone_id                = aws_lb.this.zone_id
    evaluate_target_health = true
  }
}
