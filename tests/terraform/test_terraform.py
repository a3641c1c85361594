"""Structure of terraform/ (issue 7), checked without a cloud account or a terraform binary.

Every ``.tf`` file is parsed with python-hcl2; the node.toml template is rendered here the
way ``templatefile`` renders it (plain ``${...}`` interpolations and one ``%{ for }`` loop)
and loaded with the node's own config loader; the boot script that fetches TLS material and
tokens runs against a stand-in ``aws`` command. checkov runs separately (``make checkov``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import stat
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import hcl2
import pytest

from regionsync.config import load_settings

ROOT = Path(__file__).resolve().parents[2]
TF = ROOT / "terraform"
NODE = TF / "modules" / "region-node"
EXAMPLE = TF / "examples" / "three-regions"
EXAMPLE_REGIONS = {"us-east-1", "eu-central-1", "ap-southeast-1"}
WORLD = {"0.0.0.0/0", "::/0"}

# -- parsing -------------------------------------------------------------------------------


def _strip(value: Any) -> Any:
    """python-hcl2 7 and 8 alike: no ``__meta__`` keys, no quotes around strings or labels."""
    if isinstance(value, dict):
        return {_strip(k): _strip(v) for k, v in value.items() if not str(k).startswith("__")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


@cache
def parse(path: Path) -> dict[str, Any]:
    options = getattr(hcl2, "SerializationOptions", None)
    with path.open(encoding="utf-8") as f:
        if options is None:  # python-hcl2 7
            return _strip(hcl2.load(f))
        return _strip(
            hcl2.load(
                f,
                serialization_options=options(
                    strip_string_quotes=True, explicit_blocks=False, with_comments=False
                ),
            )
        )


def tf_files() -> list[Path]:
    return sorted(p for p in TF.rglob("*.tf") if ".terraform" not in p.parts)


def blocks(doc: dict[str, Any], kind: str) -> list[tuple[str, dict[str, Any]]]:
    """``variable``/``module``/``output``/``provider`` blocks as (label, body)."""
    out = []
    for entry in doc.get(kind, []):
        for label, body in entry.items():
            out.append((label, body))
    return out


def resources(doc: dict[str, Any], kind: str = "resource") -> list[tuple[str, str, dict]]:
    out = []
    for entry in doc.get(kind, []):
        for rtype, named in entry.items():
            for name, body in named.items():
                out.append((rtype, name, body))
    return out


def module_docs(directory: Path) -> list[dict[str, Any]]:
    return [parse(p) for p in sorted(directory.glob("*.tf"))]


def module_resources(directory: Path) -> list[tuple[str, str, dict]]:
    return [r for doc in module_docs(directory) for r in resources(doc)]


def variable_defaults(directory: Path) -> dict[str, Any]:
    return {
        name: body.get("default")
        for doc in module_docs(directory)
        for name, body in blocks(doc, "variable")
    }


def locals_of(directory: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for doc in module_docs(directory):
        for entry in doc.get("locals", []):
            out.update(entry)
    return out


def one(values: Any) -> Any:
    """A block nested once: python-hcl2 gives a list of one dict."""
    if isinstance(values, list):
        assert len(values) == 1, values
        return values[0]
    return values


def resolve(value: Any, defaults: dict[str, Any]) -> Any:
    """A literal, or ``${var.x}`` replaced by that variable's default."""
    if isinstance(value, str):
        m = re.fullmatch(r"\$\{var\.(\w+)\}", value)
        if m:
            return defaults[m.group(1)]
    return value


# -- rendering templatefile() the way terraform does, for the subset the templates use ----

_FOR = re.compile(r"%\{ for (\w+) in (\w+) (~?)\}(\n?)(.*?)%\{ endfor (~?)\}(\n?)", re.S)
_INTERP = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")


def _lookup(name: str, scope: dict[str, Any]) -> Any:
    value: Any = scope
    for part in name.split("."):
        value = value[part]
    return value


def render(template: str, values: dict[str, Any]) -> str:
    """``templatefile``: ``${name}``, ``${item.field}`` and ``%{ for x in xs ~}..%{ endfor ~}``.

    A ``~}`` strip marker drops the one newline after the directive, as terraform does.
    Anything else (functions, conditionals, other directives) raises AssertionError.
    """

    def interpolate(text: str, scope: dict[str, Any]) -> str:
        return _INTERP.sub(lambda m: str(_lookup(m.group(1), scope)), text)

    def loop(m: re.Match[str]) -> str:
        var, seq, strip_in, nl_in, body, strip_out, nl_out = m.groups()
        body = ("" if strip_in else nl_in) + body
        items = [interpolate(body, {**values, var: item}) for item in values[seq]]
        return "".join(items) + ("" if strip_out else nl_out)

    out = interpolate(_FOR.sub(loop, template), values)
    assert "${" not in out and "%{" not in out, "template uses more than render() supports"
    return out


def placeholders(template: str) -> set[str]:
    loop_vars = {m.group(1) for m in _FOR.finditer(template)}
    names = {m.group(1).split(".")[0] for m in _INTERP.finditer(template)}
    names |= {m.group(2) for m in _FOR.finditer(template)}
    return names - loop_vars


def templatefile_keys(expression: str) -> set[str]:
    """Top-level keys of the object literal passed to ``templatefile(path, {...})``."""
    start = expression.index("{", expression.index(".tftpl"))
    keys, depth, i = set(), 0, start
    while i < len(expression):
        ch = expression[i]
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
            if depth == 0:
                break
        elif (
            depth == 1
            and (m := re.match(r"(\w+) = ", expression[i:]))
            and (expression[i - 1] in "{ ,")
        ):
            keys.add(m.group(1))
            i += len(m.group(0))
            continue
        i += 1
    return keys


def node_template_calls() -> dict[str, str]:
    """template file name -> the templatefile(...) expression that renders it."""
    out = {}
    for value in locals_of(NODE).values():
        if isinstance(value, str) and "templatefile(" in value:
            out[re.search(r"templates/([\w.]+\.tftpl)", value).group(1)] = value
    return out


# -- the example's values ------------------------------------------------------------------

DOMAIN = "hooks.example.com"


def example_peers(region: str) -> list[dict[str, str]]:
    return [
        {"region": r, "address": f"{r}.peers.{DOMAIN}:7070", "cidr": f"203.0.113.{i}/32"}
        for i, r in enumerate(sorted(EXAMPLE_REGIONS), start=10)
        if r != region
    ]


def template_values(region: str) -> dict[str, Any]:
    """Values for the region-node templates: variable defaults and literal locals, as
    terraform would pass them, plus example values for what only exists after apply."""
    defaults = variable_defaults(NODE)
    local_literals = {
        k: v for k, v in locals_of(NODE).items() if isinstance(v, str) and "${" not in v
    }
    values: dict[str, Any] = {}
    for name, expression in templatefile_expressions().items():
        m = re.fullmatch(r"(var|local)\.(\w+)", expression)
        if m and m.group(1) == "var" and defaults.get(m.group(2)) is not None:
            values[name] = defaults[m.group(2)]
        elif m and m.group(1) == "local" and m.group(2) in local_literals:
            values[name] = local_literals[m.group(2)]
    values.update(
        region=region,
        peers=[{"region": p["region"], "address": p["address"]} for p in example_peers(region)],
        tls_secret_id=f"regionsync/{region}/tls",
        tokens_secret_id=f"regionsync/{region}/tokens",
        volume_id="vol-0123456789abcdef0",
        volume_serial="vol0123456789abcdef0",
        package_spec="regionsync==0.1.0",
        postgres=[],  # the PostgreSQL option off (the default)
        db_secret_args="",
    )
    return values


@cache
def templatefile_expressions() -> dict[str, str]:
    """key -> expression for every key passed to any of the region-node templates."""
    out: dict[str, str] = {}
    for expression in node_template_calls().values():
        body = expression[expression.index("{", expression.index(".tftpl")) :]
        for key in templatefile_keys(expression):
            m = re.search(rf"[{{ ,]{key} = ([\w.]+)", body)
            out.setdefault(key, m.group(1) if m else "")
    return out


def rendered(name: str, region: str = "us-east-1", **overrides: Any) -> str:
    values = {**template_values(region), **overrides}
    return render((NODE / "templates" / name).read_text(encoding="utf-8"), values)


# -- the layout ----------------------------------------------------------------------------


def test_layout_and_every_file_parses() -> None:
    for directory in (
        "modules/region-node",
        "modules/anycast",
        "modules/latency-dns",
        "examples/three-regions",
    ):
        assert list((TF / directory).glob("*.tf")), f"terraform/{directory} has no .tf file"
    assert (TF / "README.md").is_file()
    files = tf_files()
    assert len(files) >= 16
    for path in files:
        assert isinstance(parse(path), dict), path


def test_every_variable_has_a_type_and_a_description() -> None:
    seen = 0
    for path in tf_files():
        for name, body in blocks(parse(path), "variable"):
            seen += 1
            where = f"{path.relative_to(TF)}: variable {name}"
            assert body.get("type"), f"{where} has no type"
            assert isinstance(body.get("description"), str), f"{where} has no description"
            assert len(body["description"].strip()) >= 10, f"{where}: describe it"
    assert seen >= 40


def test_every_output_has_a_description() -> None:
    for path in tf_files():
        for name, body in blocks(parse(path), "output"):
            assert body.get("description"), f"{path.relative_to(TF)}: output {name}"


def test_no_hard_coded_account_ids_amis_or_secrets() -> None:
    texts = {p: p.read_text(encoding="utf-8") for p in TF.rglob("*") if p.is_file()}
    for path, text in texts.items():
        where = path.relative_to(TF)
        assert not re.search(r"\bami-[0-9a-f]{8,17}\b", text), f"{where}: hard-coded AMI"
        assert not re.search(r"(?<![\w-])\d{12}(?![\w-])", text), f"{where}: an account id?"
        assert not re.search(r"\bAKIA[0-9A-Z]{16}\b", text), f"{where}: an access key"
        assert "PRIVATE KEY-----" not in text, f"{where}: a private key"
    for path in tf_files():
        doc = parse(path)
        kinds = {t for t, _, _ in resources(doc)} | {t for t, _, _ in resources(doc, "data")}
        # a secret version would put the value in the state file
        assert "aws_secretsmanager_secret_version" not in kinds, path
        for _, _, body in resources(doc):
            assert not str(body.get("ami", "${")).startswith("ami-"), path


def test_volumes_are_encrypted_with_the_nodes_key() -> None:
    volumes = instances = 0
    for path in tf_files():
        for rtype, name, body in resources(parse(path)):
            if rtype == "aws_ebs_volume":
                volumes += 1
                assert body.get("encrypted") is True, f"{path}: {name}"
                assert body.get("kms_key_id"), f"{path}: {name} uses the default key"
            if rtype == "aws_instance":
                instances += 1
                root = one(body["root_block_device"])
                assert root.get("encrypted") is True, f"{path}: {name} root volume"
                assert one(body["metadata_options"])["http_tokens"] == "required"
    assert volumes >= 1 and instances >= 1


def test_data_volume_outlives_the_instance_and_holds_data_dir() -> None:
    res = {(t, n): b for t, n, b in module_resources(NODE)}
    attachment = res[("aws_volume_attachment", "data")]
    # one volume per instance, attached to it
    assert attachment["volume_id"] == "${aws_ebs_volume.data[count.index].id}"
    assert attachment["instance_id"] == "${aws_instance.node[count.index].id}"
    assert res[("aws_ebs_volume", "data")]["type"] in {"gp3", "io2"}  # a real block device
    boot = rendered("bootstrap.sh.tftpl")
    assert "nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0" in boot
    assert "mount /var/lib/regionsync" in boot and "mkfs" in boot
    assert "blkid" in boot  # formats only a blank volume


def _ingress_rules(directory: Path) -> list[tuple[str, dict[str, Any]]]:
    """(where, rule) for every ingress rule, whatever resource shape declares it."""
    rules = []
    for rtype, name, body in module_resources(directory):
        where = f"{directory.relative_to(TF)}: {rtype}.{name}"
        if rtype == "aws_security_group":
            rules += [(where, r) for r in body.get("ingress", [])]
        elif rtype == "aws_security_group_rule" and body.get("type") == "ingress":
            rules.append((where, body))
        elif rtype == "aws_vpc_security_group_ingress_rule":
            rules.append((where, body))
    return rules


def _cidrs(rule: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for key in ("cidr_blocks", "ipv6_cidr_blocks", "cidr_ipv4", "cidr_ipv6"):
        value = rule.get(key)
        out |= set(value) if isinstance(value, list) else {value} if value else set()
    return out


def test_no_rule_opens_grpc_to_the_world() -> None:
    modules = [p.parent for p in TF.glob("modules/*/main.tf")]
    grpc_rules = 0
    for directory in modules:
        defaults = variable_defaults(directory)
        grpc_port = defaults.get("grpc_port", 7070)
        for where, rule in _ingress_rules(directory):
            protocol = str(rule.get("ip_protocol", rule.get("protocol", "tcp")))
            lo = resolve(rule.get("from_port", 0), defaults)
            hi = resolve(rule.get("to_port", 65535), defaults)
            covers_grpc = (
                protocol in {"-1", "all"}
                or (isinstance(lo, int) and isinstance(hi, int) and lo <= grpc_port <= hi)
                or "grpc_port" in f"{lo}{hi}"
            )
            cidrs = _cidrs(rule)
            for cidr in cidrs:
                if "${" not in cidr:
                    net = ipaddress.ip_network(cidr)
                    assert not (covers_grpc and net.num_addresses > 1), f"{where}: {cidr}"
            if cidrs & WORLD:
                # the only thing open to the internet is HTTPS on the load balancer
                assert (protocol, lo, hi) == ("tcp", 443, 443), f"{where} opens {lo}-{hi}"
            if covers_grpc:
                grpc_rules += 1
                assert not cidrs & WORLD, f"{where} opens gRPC to the world"
                assert cidrs == {"${each.value.cidr}"}, f"{where}: gRPC only from peers"
                # one rule per peer instance address, every one of them from var.peers
                assert rule["for_each"] == "${local.peer_sources}", where
                sources = locals_of(directory)["peer_sources"]
                assert "for p in var.peers" in sources and "p.cidrs" in sources, sources
    assert grpc_rules == 1


def test_peer_cidrs_are_single_addresses_of_the_peers() -> None:
    outputs = dict(x for doc in module_docs(NODE) for x in blocks(doc, "output"))
    peer = outputs["peer"]["value"]
    # every instance's Elastic IP (node_count of them), each a /32
    assert peer["cidrs"] == '${[for eip in aws_eip.node : "${eip.public_ip}/32"]}'
    assert set(peer) == {"region", "address", "cidrs"}
    peers_var = dict(x for doc in module_docs(NODE) for x in blocks(doc, "variable"))["peers"]
    condition = one(peers_var["validation"])["condition"]
    assert "/32" in condition and "p.cidrs" in condition


def test_http_port_is_open_to_the_load_balancer_only() -> None:
    defaults = variable_defaults(NODE)
    http_rules = [
        (where, rule)
        for where, rule in _ingress_rules(NODE)
        if resolve(rule.get("from_port"), defaults) == defaults["http_port"]
    ]
    assert len(http_rules) == 1
    where, rule = http_rules[0]
    assert rule["referenced_security_group_id"] == "${aws_security_group.lb.id}", where
    assert not _cidrs(rule), where


def test_health_checks_use_readyz() -> None:
    res = {(t, n): b for t, n, b in module_resources(NODE)}
    assert one(res[("aws_lb_target_group", "node")]["health_check"])["path"] == "/readyz"
    anycast = module_resources(TF / "modules" / "anycast")
    groups = [b for t, _, b in anycast if t == "aws_globalaccelerator_endpoint_group"]
    assert [g["health_check_path"] for g in groups] == ["/readyz"]
    latency = module_resources(TF / "modules" / "latency-dns")
    checks = [b for t, _, b in latency if t == "aws_route53_health_check"]
    assert [c["resource_path"] for c in checks] == ["/readyz"]
    records = [b for t, _, b in latency if t == "aws_route53_record"]
    assert records and all(r["health_check_id"] and r["latency_routing_policy"] for r in records)


def test_instance_role_reads_only_its_own_secrets() -> None:
    docs = {
        n: b
        for t, n, b in (r for d in module_docs(NODE) for r in resources(d, "data"))
        if t == "aws_iam_policy_document"
    }
    statements = docs["node"]["statement"]
    actions = {a for s in statements for a in s["actions"]}
    assert actions == {"secretsmanager:GetSecretValue", "kms:Decrypt"}
    for s in statements:
        assert "*" not in s["resources"]


# -- the example ---------------------------------------------------------------------------


def _example() -> tuple[dict[str, str], dict[str, dict[str, Any]], dict[str, Any]]:
    doc = parse(EXAMPLE / "main.tf")
    provider_regions = {
        body["alias"]: body["region"] for name, body in blocks(doc, "provider") if name == "aws"
    }
    modules = dict(blocks(doc, "module"))
    locals_ = {k: v for entry in doc.get("locals", []) for k, v in entry.items()}
    return provider_regions, modules, locals_


def _provider_region(body: dict[str, Any], provider_regions: dict[str, str]) -> str:
    alias = re.fullmatch(r"\$\{aws\.(\w+)\}", body["providers"]["aws"]).group(1)
    return provider_regions[alias]


def test_example_has_the_three_regions_each_peering_with_the_other_two() -> None:
    provider_regions, modules, _ = _example()
    nodes = {n: b for n, b in modules.items() if b["source"].endswith("modules/region-node")}
    region_of = {}
    for name, body in nodes.items():
        region = _provider_region(body, provider_regions)
        assert body["region"] == region, f"module {name}: region differs from its provider"
        region_of[name] = region
    assert set(region_of.values()) == EXAMPLE_REGIONS
    assert len(region_of) == len(EXAMPLE_REGIONS)
    for name, body in nodes.items():
        peers = body["peers"]
        assert isinstance(peers, list), f"module {name}: peers must list the other nodes"
        expected = {f"${{module.{other}.peer}}" for other in nodes if other != name}
        assert set(peers) == expected and len(peers) == len(expected), name
        # the node sits in a network of its own region
        network = re.fullmatch(r"\$\{module\.(\w+)\.vpc_id\}", body["vpc_id"]).group(1)
        assert _provider_region(modules[network], provider_regions) == region_of[name]
        assert body["subnet_ids"] == f"${{module.{network}.public_subnet_ids}}"


def test_example_switches_between_anycast_and_latency_dns() -> None:
    provider_regions, modules, locals_ = _example()
    variables = dict(blocks(parse(EXAMPLE / "variables.tf"), "variable"))
    routing = variables["routing"]
    assert routing["default"] in {"anycast", "latency-dns"}
    condition = one(routing["validation"])["condition"]
    assert '"anycast"' in condition and '"latency-dns"' in condition
    anycast, latency = modules["anycast"], modules["latency_dns"]
    assert anycast["source"].endswith("modules/anycast")
    assert latency["source"].endswith("modules/latency-dns")
    assert anycast["count"] == '${var.routing == "anycast" ? 1 : 0}'
    assert latency["count"] == '${var.routing == "latency-dns" ? 1 : 0}'
    node_modules = {n for n, b in modules.items() if b["source"].endswith("modules/region-node")}
    assert set(locals_["nodes"].values()) == {f"${{module.{n}}}" for n in node_modules}
    assert set(locals_["nodes"]) == EXAMPLE_REGIONS
    for body in (anycast, latency):
        assert "local.nodes" in body["endpoints"]


# -- node.toml, the service and the boot script ----------------------------------------------


def test_templates_get_exactly_the_values_they_use() -> None:
    calls = node_template_calls()
    assert set(calls) == {p.name for p in (NODE / "templates").glob("*.tftpl")}
    for name, expression in calls.items():
        text = (NODE / "templates" / name).read_text(encoding="utf-8")
        assert placeholders(text) == templatefile_keys(expression), name


@pytest.mark.parametrize("region", sorted(EXAMPLE_REGIONS))
def test_rendered_node_toml_loads_with_the_config_loader(tmp_path: Path, region: str) -> None:
    path = tmp_path / "node.toml"
    path.write_text(rendered("node.toml.tftpl", region), encoding="utf-8")
    settings = load_settings(path)
    assert settings.region == region
    assert str(settings.data_dir) == variable_defaults(NODE)["data_dir"]
    assert settings.http_listen == f"0.0.0.0:{variable_defaults(NODE)['http_port']}"
    assert settings.grpc_listen == f"0.0.0.0:{variable_defaults(NODE)['grpc_port']}"
    assert {p.region for p in settings.peers} == EXAMPLE_REGIONS - {region}
    assert [p.address for p in settings.peers] == [p["address"] for p in example_peers(region)]
    assert settings.tls is not None
    assert settings.tokens == []  # appended at boot from Secrets Manager, never rendered


def test_tls_paths_are_the_files_the_boot_script_writes(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(rendered("node.toml.tftpl"), encoding="utf-8")
    tls = load_settings(path).tls
    assert tls is not None
    unit = rendered("regionsync.service.tftpl")
    pre = re.search(r"^ExecStartPre=\+(.*)$", unit, re.M).group(1).split()
    start = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1).split()
    arg = {pre[i]: pre[i + 1] for i in range(len(pre) - 1) if pre[i].startswith("--")}
    tls_dir = Path(arg["--tls-dir"])
    assert (tls.cert, tls.key, tls.ca) == (
        tls_dir / "node.pem",
        tls_dir / "node.key",
        tls_dir / "ca.pem",
    )
    assert start[-2:] == ["--config", arg["--out"]]  # the node reads what the script wrote
    assert arg["--base"] != arg["--out"]
    user_data = locals_of(NODE)["user_data"]
    assert "node.base.toml" in arg["--base"] and "/node.base.toml" in user_data
    assert "/usr/local/libexec/regionsync-secrets" in pre[1] and "regionsync-secrets" in user_data


FAKE_AWS = """\
import json, sys
args = sys.argv[1:]
secret = args[args.index("--secret-id") + 1]
store = json.load(open({store!r}))
if secret not in store:
    print("An error occurred (ResourceNotFoundException)", file=sys.stderr)
    sys.exit(254)
print(store[secret])
"""

PEM = "-----BEGIN {0}-----\nMIIBexample\n-----END {0}-----"


def _boot(
    tmp_path: Path, secrets: dict[str, str], extra: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    store = tmp_path / "store.json"
    store.write_text(json.dumps(secrets), encoding="utf-8")
    script = tmp_path / "fake_aws.py"
    script.write_text(FAKE_AWS.format(store=str(store)), encoding="utf-8")
    aws = tmp_path / "aws"  # stands in for the AWS CLI on the instance
    aws.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n', encoding="utf-8")
    aws.chmod(0o755)
    base = tmp_path / "node.base.toml"
    base.write_text(rendered("node.toml.tftpl", tls_dir=tmp_path / "tls"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGIONSYNC_")}
    env["REGIONSYNC_AWS_CLI"] = str(aws)
    cmd = [
        sys.executable,
        str(NODE / "files" / "regionsync-secrets"),
        "--region",
        "us-east-1",
        "--tls-secret",
        "rs/tls",
        "--tokens-secret",
        "rs/tokens",
        "--base",
        str(base),
        "--out",
        str(tmp_path / "node.toml"),
        "--tls-dir",
        str(tmp_path / "tls"),
        *(extra or []),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)


TLS_SECRET = json.dumps(
    {
        "cert": PEM.format("CERTIFICATE"),
        "key": PEM.format("PRIVATE KEY"),
        "ca": PEM.format("CERTIFICATE"),
    }
)


def test_boot_script_writes_tls_files_and_tokens_the_node_loads(tmp_path: Path) -> None:
    tokens = [
        {"token": "adm-" + "x" * 28, "scope": "admin"},
        {"token": 'pub-"quoted"\\-' + "y" * 20, "scope": "tenant:acme:publish"},
    ]
    done = _boot(tmp_path, {"rs/tls": TLS_SECRET, "rs/tokens": json.dumps(tokens)})
    assert done.returncode == 0, done.stderr
    settings = load_settings(tmp_path / "node.toml")
    assert [(t.token, t.scope) for t in settings.tokens] == [
        (t["token"], t["scope"]) for t in tokens
    ]
    assert settings.tls is not None
    assert settings.tls.cert == tmp_path / "tls" / "node.pem"
    assert settings.tls.cert.read_text(encoding="utf-8") == PEM.format("CERTIFICATE") + "\n"
    key = tmp_path / "tls" / "node.key"
    assert key.read_text(encoding="utf-8").startswith("-----BEGIN PRIVATE KEY-----")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "node.toml").stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        ({"rs/tls": TLS_SECRET}, "cannot read rs/tokens"),
        ({"rs/tls": TLS_SECRET, "rs/tokens": "[]"}, "non-empty"),
        ({"rs/tls": TLS_SECRET, "rs/tokens": '[{"token": "short", "scope": "admin"}]'}, "tokens"),
        (
            {"rs/tls": TLS_SECRET, "rs/tokens": json.dumps([{"token": "z" * 20, "scope": "root"}])},
            "scope",
        ),
        ({"rs/tls": json.dumps({"cert": "x", "key": "y", "ca": "z"}), "rs/tokens": "[]"}, "PEM"),
    ],
)
def test_boot_script_refuses_to_start_the_node_on_bad_secrets(
    tmp_path: Path, secrets: dict[str, str], message: str
) -> None:
    done = _boot(tmp_path, secrets)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


def test_user_data_carries_no_secret() -> None:
    user_data = locals_of(NODE)["user_data"]
    assert "secret_string" not in user_data and "aws_secretsmanager_secret_version" not in user_data
    unit = rendered("regionsync.service.tftpl")
    boot = rendered("bootstrap.sh.tftpl")
    for text in (rendered("node.toml.tftpl"), unit, boot):
        assert not re.search(r"^\[\[tokens\]\]|^token *=|-----BEGIN", text, re.M)
    assert unit.count("ExecStartPre=+") == 1


def test_user_data_stays_under_the_ec2_limit() -> None:
    # EC2 refuses user data over 16 KB; yamlencode adds a little per file
    parts = [rendered(p.name) for p in (NODE / "templates").glob("*.tftpl")]
    parts.append((NODE / "files" / "regionsync-secrets").read_text(encoding="utf-8"))
    assert sum(len(p.encode()) for p in parts) < 12 * 1024


# -- the PostgreSQL option and node_count (issue 16) -----------------------------------------

PG_URL = "postgresql://regionsync@rs-us-east-1-db.abc.us-east-1.rds.amazonaws.com:5432/regionsync?sslmode=require"
PG = [{"url": PG_URL, "pool_max": 10, "key_file": "/etc/regionsync/secrets.keys"}]


def test_postgres_option_renders_a_store_the_node_loads(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(rendered("node.toml.tftpl", postgres=PG), encoding="utf-8")
    settings = load_settings(path)
    assert settings.store == PG_URL and settings.store_pool_max == 10
    assert settings.secrets.key_file == Path("/etc/regionsync/secrets.keys")
    assert settings.tls is not None and len(settings.peers) == 2
    # off (the default): SQLite on the data volume, the key ring generated there
    path.write_text(rendered("node.toml.tftpl"), encoding="utf-8")
    settings = load_settings(path)
    assert settings.store == "sqlite" and settings.secrets.key_file is None
    # what terraform passes: a URL without a password (libpq reads PGPASSFILE), TLS required
    url = one(re.findall(r'url\s*=\s*"([^"]+)"', locals_of(NODE)["postgres_toml"]))
    assert url.startswith("postgresql://${db.username}@${db.address}:${db.port}/")
    assert url.endswith("?sslmode=require") and "password" not in url
    unit = rendered("regionsync.service.tftpl")
    assert re.search(r"^Environment=PGPASSFILE=/etc/regionsync/pgpass$", unit, re.M)


def _node_and_db_resources() -> dict[tuple[str, str], dict[str, Any]]:
    return {(t, n): b for t, n, b in module_resources(NODE)}


def test_database_is_encrypted_private_and_open_to_the_node_instances_only() -> None:
    res = _node_and_db_resources()
    db = res[("aws_db_instance", "pg")]
    assert db["count"] == "${local.pg_count}"
    assert locals_of(NODE)["pg_count"] == "${var.postgres_enabled ? 1 : 0}"
    assert db["storage_encrypted"] is True and db["kms_key_id"] == "${aws_kms_key.node.arn}"
    assert db["publicly_accessible"] is False
    assert db["db_subnet_group_name"] == "${aws_db_subnet_group.pg[0].name}"
    # the password: generated by RDS into a secret encrypted with the node key, never here
    assert db["manage_master_user_password"] is True
    assert db["master_user_secret_kms_key_id"] == "${aws_kms_key.node.arn}"
    assert "password" not in db and "skip_final_snapshot" in db and not db["skip_final_snapshot"]
    group = res[("aws_db_subnet_group", "pg")]
    assert group["subnet_ids"] == "${var.postgres_subnet_ids}"
    assert (
        "length(var.postgres_subnet_ids) >= 2"
        in one(one(group["lifecycle"])["precondition"])["condition"]
    )
    assert db["vpc_security_group_ids"] == ["${aws_security_group.db[0].id}"]
    rules = [
        (n, b)
        for (t, n), b in res.items()
        if t == "aws_vpc_security_group_ingress_rule"
        and b["security_group_id"] == "${aws_security_group.db[0].id}"
    ]
    assert len(rules) == 1
    _, rule = rules[0]
    assert rule["referenced_security_group_id"] == "${aws_security_group.node.id}"
    assert (rule["from_port"], rule["to_port"]) == ("${local.db_port}", "${local.db_port}")
    assert not _cidrs(rule)
    params = {p["name"]: p["value"] for p in res[("aws_db_parameter_group", "pg")]["parameter"]}
    assert params["rds.force_ssl"] == "1"


def test_instance_role_reads_the_key_ring_and_database_secrets_of_the_option() -> None:
    docs = {
        n: b
        for t, n, b in (r for d in module_docs(NODE) for r in resources(d, "data"))
        if t == "aws_iam_policy_document"
    }
    (read,) = [s for s in docs["node"]["statement"] if s["sid"] == "ReadOwnSecrets"]
    assert "aws_secretsmanager_secret.keys" in read["resources"]
    assert "db.master_user_secret[0].secret_arn" in read["resources"]
    keys = _node_and_db_resources()[("aws_secretsmanager_secret", "keys")]
    assert keys["count"] == "${var.postgres_enabled ? 1 : 0}"
    assert keys["kms_key_id"] == "${aws_kms_key.node.arn}"
    args = locals_of(NODE)["db_secret_args"]
    for flag in ("--keys-secret", "--keys-file", "--db-secret", "--pgpass"):
        assert f'"{flag}"' in args, flag


PER_INSTANCE = [
    ("aws_instance", "node"),
    ("aws_ebs_volume", "data"),
    ("aws_volume_attachment", "data"),
    ("aws_eip", "node"),
    ("aws_eip_association", "node"),
    ("aws_lb_target_group_attachment", "node"),
]


def test_node_count_needs_postgres_and_scales_every_per_instance_resource() -> None:
    variables = dict(x for doc in module_docs(NODE) for x in blocks(doc, "variable"))
    assert variables["node_count"]["default"] == 1
    assert variables["postgres_enabled"]["default"] is False
    assert "var.node_count >= 1" in one(variables["node_count"]["validation"])["condition"]
    res = _node_and_db_resources()
    (check,) = one(res[("aws_instance", "node")]["lifecycle"])["precondition"]
    assert check["condition"] == "${var.node_count == 1 || var.postgres_enabled}"
    assert "postgres_enabled" in check["error_message"]
    for key in PER_INSTANCE:
        assert res[key]["count"] == "${var.node_count}", key
    # spread over the subnets, the volume in its instance's zone
    assert res[("aws_instance", "node")]["subnet_id"] == (
        "${data.aws_subnet.node[count.index % length(var.subnet_ids)].id}"
    )
    assert res[("aws_ebs_volume", "data")]["availability_zone"] == (
        "${data.aws_subnet.node[count.index % length(var.subnet_ids)].availability_zone}"
    )
    # peers dial one name that resolves to every instance
    assert res[("aws_route53_record", "peer")]["records"] == "${aws_eip.node[*].public_ip}"


def test_example_passes_the_option_and_the_private_subnets_to_every_region() -> None:
    _, modules, _ = _example()
    nodes = {n: b for n, b in modules.items() if b["source"].endswith("modules/region-node")}
    for name, body in nodes.items():
        assert body["postgres_enabled"] == "${var.postgres_enabled}", name
        assert body["node_count"] == "${var.node_count}", name
        network = re.fullmatch(r"\$\{module\.(\w+)\.vpc_id\}", body["vpc_id"]).group(1)
        assert body["postgres_subnet_ids"] == f"${{module.{network}.private_subnet_ids}}"
    net = {(t, n): b for t, n, b in module_resources(TF / "modules" / "network")}
    assert ("aws_route_table", "private") in net
    # the private subnets' route table has no route out of the VPC
    routes = [b for (t, _), b in net.items() if t == "aws_route"]
    assert all(r["route_table_id"] != "${aws_route_table.private.id}" for r in routes)
    assert "route" not in net[("aws_route_table", "private")]


KEY = "k1:" + "A" * 43 + "="
DB_SECRET = json.dumps({"username": "regionsync", "password": r"p:a\ss"})


def _boot_db(tmp_path: Path, secrets: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    flags = ["--keys-secret", "rs/keys", "--keys-file", str(tmp_path / "secrets.keys"),
             "--db-secret", "rs/db", "--pgpass", str(tmp_path / "pgpass"), *extra]  # fmt: skip
    return _boot(tmp_path, secrets, flags)


def test_boot_script_writes_the_key_ring_and_the_password_file(tmp_path: Path) -> None:
    base = {"rs/tls": TLS_SECRET, "rs/tokens": json.dumps([{"token": "t" * 20, "scope": "admin"}])}
    done = _boot_db(
        tmp_path, {**base, "rs/keys": KEY + "\nk0:" + "B" * 43 + "=", "rs/db": DB_SECRET}
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "secrets.keys").read_text() == KEY + "\nk0:" + "B" * 43 + "=\n"
    # libpq's password file format: ':' and '\' in a field escaped with '\'
    assert (tmp_path / "pgpass").read_text() == "*:*:*:regionsync:p\\:a\\\\ss\n"
    for name in ("secrets.keys", "pgpass"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    # the timer's refresh: the password file only
    (tmp_path / "pgpass").unlink()
    (tmp_path / "node.toml").unlink()
    done = _boot_db(tmp_path, {"rs/db": DB_SECRET}, "--only-db")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "pgpass").is_file() and not (tmp_path / "node.toml").exists()


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        ({"rs/keys": "k1:short", "rs/db": DB_SECRET}, "keys secret"),
        ({"rs/keys": KEY}, "cannot read rs/db"),
        ({"rs/keys": KEY, "rs/db": '{"username": "u"}'}, "database secret"),
        ({"rs/keys": KEY, "rs/db": "not json"}, "database secret"),
    ],
)
def test_boot_script_refuses_bad_database_secrets(
    tmp_path: Path, secrets: dict[str, str], message: str
) -> None:
    base = {"rs/tls": TLS_SECRET, "rs/tokens": json.dumps([{"token": "t" * 20, "scope": "admin"}])}
    done = _boot_db(tmp_path, {**base, **secrets})
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert not (tmp_path / "node.toml").exists()
