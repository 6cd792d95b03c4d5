"""The command line, kept apart from the commands so that `--help` and the man page generator
load argparse and nothing else. Each command names its handler as "module:function", imported
only when that command runs."""

from __future__ import annotations

import argparse
import functools
from typing import Any

from lessor import __version__
from lessor.cli import completion
from lessor.cli.output import output_format
from lessor.protocol.lease_ids import LEASE_ID

EPILOG = """\
examples:
  lessor config set dev --endpoint https://lessor.example.com --auth ssh
  lessor login
  lessor lease ci-small --ttl 30m          # wait, write ~/.kube/lessor-<id>, print it
  KUBECONFIG=~/.kube/lessor-<id> kubectl get nodes
  lessor release <id>

In CI, no config is needed: LESSOR_ENDPOINT=https://... LESSOR_TOKEN=... lessor lease ci-small

exit codes: 0 ok, 1 server error or unreachable, 2 usage error, 3 authentication or
permission, 4 not found, 5 timed out, 6 refused (conflict or limit), 130 interrupted.
"""


# Examples of the commands whose description has none of its own: `--help` and the man page
# (lessor.cli.manpages) show them; a unit test holds every command to having some.
EXAMPLES = {
    "status": "lessor status\nlessor status -o json | jq '.leases[].id'",
    "version": "lessor version",
    "login": "lessor login\nlessor login --ttl 8h\nlessor login --device      # oidc, headless",
    "logout": "lessor logout",
    "release": "lessor release pr-1234\nlessor release l3f2a9c1d0e4b -o json",
    "extend": "lessor extend pr-1234 --ttl 30m",
    "config": "lessor config set dev --endpoint https://lessor.example.com --auth ssh\n"
    "lessor config use dev\nlessor config list -o yaml\n"
    "lessor config rename dev staging\nlessor config delete staging",
    "run": "lessor run agents -- python3 -c 'print(1)'\n"
    "lessor run agents --timeout 5m -- make test",
    "exec": "lessor exec sb-1 -- ls /workspace\nlessor exec sb-1 --detach -- sleep 600",
    "logs": "lessor logs sb-1 --tail 50\nlessor logs sb-1 -c sidecar\nlessor logs sb-1 x0123 -f",
    "cancel": "lessor cancel sb-1 x0123456789abcdef01234567",
    "attach": "lessor attach sb-1\nlessor attach sb-1 -c shell",
    "port-forward": "lessor port-forward sb-1 8080:http\nlessor port-forward sb-1 :5432",
}


def _with_examples(name: str, description: str) -> str:
    if name not in EXAMPLES:
        return description
    lines = "\n".join(f"  {line}" for line in EXAMPLES[name].splitlines())
    return f"{description}\n\nexamples:\n{lines}"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


def lease_name(value: str) -> str:
    """A lease id or alias (both DNS labels): anything else could never name a lease, and is
    never put in a request's path. `lease/ID` and `sandbox/ID`, as `-o name` prints them, are
    taken too (`lessor get -o name | xargs -n1 lessor release`)."""
    kind, slash, rest = value.partition("/")
    if slash and kind in ("lease", "sandbox"):
        value = rest
    if not LEASE_ID.match(value):
        raise argparse.ArgumentTypeError(
            f"{value[:80]!r} is no lease id or alias (lowercase letters, digits and '-')"
        )
    return value


def _common() -> argparse.ArgumentParser:
    """Options every command accepts before or after its name. SUPPRESS keeps a subcommand
    from overwriting what was given before it with the default."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("target selection")
    target = group.add_argument(
        "--target", default=argparse.SUPPRESS, metavar="NAME", help="named target from the config"
    )
    target.completer = completion.targets  # type: ignore[attr-defined]
    group.add_argument(
        "--endpoint",
        default=argparse.SUPPRESS,
        metavar="URL",
        help="one-off endpoint override (env LESSOR_ENDPOINT)",
    )
    common.add_argument(
        "--request-timeout",
        default=argparse.SUPPRESS,
        metavar="DURATION",
        help="give up on a request with no answer after this long (30s; env "
        "LESSOR_REQUEST_TIMEOUT)",
    )
    common.add_argument(
        "--retry-budget",
        default=argparse.SUPPRESS,
        metavar="DURATION",
        help="how long to wait out refusals that say when to retry (2m; env LESSOR_RETRY_BUDGET)",
    )
    common.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print each HTTP exchange on stderr, credentials left out (env LESSOR_DEBUG=1)",
    )
    return common


def _lease_argument(parser: argparse.ArgumentParser, **options: Any) -> None:
    """LEASE: an id or an alias; Tab completes the caller's (lessor.cli.completion)."""
    action = parser.add_argument("lease_id", metavar="LEASE", type=lease_name, **options)
    action.completer = completion.leases  # type: ignore[attr-defined]


def _pool_argument(parser: argparse.ArgumentParser, **options: Any) -> None:
    action = parser.add_argument("pool", metavar="POOL", **options)
    action.completer = completion.pools  # type: ignore[attr-defined]


def _output(*, wide: bool = False, names: bool = False) -> argparse.ArgumentParser:
    """-o FORMAT; `names`: a command that lists things, which also takes `-o name` (one
    kind/id a line) and `--no-headers` (lessor.cli.output)."""
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument(
        "-o",
        "--output",
        type=functools.partial(output_format, wide=wide, names=names),
        default="text",
        metavar="FORMAT",
        help="text for people (default)"
        + (", wide with more columns" if wide else "")
        + "; json, yaml"
        + (", name (kind/id lines)" if names else "")
        + " or jsonpath={.field} for scripts",
    )
    if names:
        output.add_argument(
            "--no-headers", action="store_true", help="text tables without their header row"
        )
    return output


def _command_arguments(parser: argparse.ArgumentParser) -> None:
    """What `run` and `exec` both take: the command and how it runs."""
    parser.add_argument("--timeout", metavar="DURATION", help="default 60s, at most 1h")
    parser.add_argument("--cwd", metavar="DIR", help="working directory in the sandbox")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND")


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    handler: str,
    summary: str,
    description: str,
    *,
    prints: bool = True,
    wide: bool = False,
    names: bool = False,
) -> argparse.ArgumentParser:
    parents = [_common()] + ([_output(wide=wide, names=names)] if prints else [])
    parser = commands.add_parser(
        name,
        help=summary,
        description=_with_examples(name, description),
        parents=parents,
        formatter_class=_Formatter,
    )
    parser.set_defaults(handler=handler)
    return parser


def _lease(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lease = _command(
        commands,
        "lease",
        "lessor.cli.commands.lease:run",
        "lease a cluster (and write its kubeconfig) or a sandbox from a pool",
        """\
Lease a cluster from POOL, wait until it is Bound, write its kubeconfig (mode 0600) and print
the lease id, resource kind, capabilities, expiry and kubeconfig path. From a Sandbox pool:
lease a sandbox, wait until it is Ready and print the same without a kubeconfig; use it with
exec, logs, attach and port-forward.

While waiting on a terminal, one line shows the phase, queue position and time elapsed; when
output goes to a pipe or file nothing is printed until the end. Ctrl-C or --wait-timeout
releases a lease this command created (a lease reused with --ensure is left alone).

examples:
  lessor lease ci-small
  lessor lease ci-small --ttl 2h --name pr-1234 --ensure   # same lease on every retry
  lessor lease ci-small --metadata-json '{"job": "build-7"}' -o json
  lessor lease ci-small --no-wait -o json | jq -r .id""",
    )
    _pool_argument(lease, help="pool to lease from")
    _lease_options(lease)
    lease.add_argument(
        "--kubeconfig", metavar="PATH", help="where to write the kubeconfig (~/.kube/lessor-<id>)"
    )
    lease.add_argument(
        "--no-wait", action="store_true", help="return once the lease is created (Pending)"
    )
    lease.add_argument(
        "--ensure",
        action="store_true",
        help="reuse your active lease named --name instead of creating one",
    )


def _lease_options(parser: argparse.ArgumentParser) -> None:
    """What `lease` and `with-lease` both take to make a lease and wait for it."""
    parser.add_argument("--ttl", metavar="DURATION", help="lease time, e.g. 30m, 2h (pool default)")
    parser.add_argument(
        "--wait-timeout", metavar="DURATION", help="give up waiting after this long (exit 5)"
    )
    parser.add_argument(
        "--metadata-json", metavar="JSON|@FILE", help="descriptive metadata: a JSON object"
    )
    parser.add_argument("--name", metavar="ALIAS", help="name the lease (unique among yours)")
    _unsafe_kubeconfig_option(parser)


def _unsafe_kubeconfig_option(parser: argparse.ArgumentParser) -> None:
    """What every command that writes a lease's kubeconfig takes (review N11)."""
    parser.add_argument(
        "--allow-unsafe-kubeconfig",
        action="store_true",
        help="write the server's kubeconfig even if it runs a program (exec, auth-provider), "
        "reads a file (tokenFile), uses a proxy-url or skips TLS verification; refused otherwise",
    )


def _with_lease(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    wrap = _command(
        commands,
        "with-lease",
        "lessor.cli.commands.with_lease:run",
        "lease a cluster, run a command with it, release it however the command ends",
        """\
Lease a cluster from POOL and wait until it is Bound (as `lease` does), run COMMAND with
KUBECONFIG (the lease's kubeconfig) and LESSOR_LEASE_ID set, and release the lease when COMMAND
ends: by exiting, or after SIGINT, SIGTERM or SIGHUP, which are passed on to it first (a second
Ctrl-C stops waiting for it). Exits with COMMAND's status (128+N for signal N); a lease that
could not be had exits as `lease` does, without running COMMAND.

While COMMAND runs, the lease is extended before it expires, by its TTL each time, as long as
its policy allows; then one warning says when it will expire (--no-keepalive: never).

examples:
  lessor with-lease ci-small -- make e2e
  lessor with-lease ci-small --ttl 30m --name "pr-$PR" -- ./run-tests.sh --fast
  lessor with-lease ci-small --diagnostics-on-failure artifacts/ -- make e2e""",
    )
    _pool_argument(wrap, help="pool to lease from")
    _lease_options(wrap)
    wrap.add_argument(
        "--no-keepalive", action="store_true", help="never extend the lease while COMMAND runs"
    )
    wrap.add_argument(
        "--diagnostics-on-failure",
        metavar="DIR",
        help="when COMMAND fails, save the lease's diagnostics bundle into DIR (on pools that "
        "capture them)",
    )
    wrap.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND")


def _coming_back(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """What a lease's owner runs after `lessor lease`: get, kubeconfig, wait."""
    get = _command(
        commands,
        "get",
        "lessor.cli.commands.describe:get",
        "your leases, or one lease in full",
        """\
Without LEASE: list your cluster and Sandbox leases (ended ones too, while the server keeps
them) with their pool, phase and expiry; -o wide adds the expiry's time and the kubeconfig
files and contexts this CLI wrote for each. With LEASE (an id or an alias): that lease in full,
queue position, cluster health and message included. A kubeconfig is never printed: `lessor
kubeconfig` writes it to a private file.

examples:
  lessor get
  lessor get -o wide
  lessor get pr-1234
  lessor get -o json | jq -r '.[] | select(.phase == "Bound") | .id'
  lessor get -o name                  # lease/l0123abcd4567, sandbox/s...: as LEASE takes them""",
        wide=True,
        names=True,
    )
    _lease_argument(get, nargs="?")
    kubeconfig = _command(
        commands,
        "kubeconfig",
        "lessor.cli.commands.describe:kubeconfig",
        "write a Bound lease's kubeconfig again, or merge it into yours",
        """\
Write LEASE's kubeconfig (mode 0600) to ~/.kube/lessor-<id> or --kubeconfig PATH: after
`lessor lease --no-wait`, or when the file was lost. With --merge, add it to your kubeconfig
(the first file of $KUBECONFIG, else ~/.kube/config) as the context, cluster and user
lessor-<id>, leaving your current context as it is. `lessor release` removes what was written:
the file (unless you changed it since) or the three merged entries.

examples:
  lessor kubeconfig pr-1234
  lessor kubeconfig pr-1234 --merge && kubectl --context lessor-<id> get nodes""",
    )
    _lease_argument(kubeconfig)
    where = kubeconfig.add_mutually_exclusive_group()
    where.add_argument("--kubeconfig", metavar="PATH", help="where to write it")
    where.add_argument("--merge", action="store_true", help="merge into your kubeconfig")
    _unsafe_kubeconfig_option(kubeconfig)
    wait = _command(
        commands,
        "wait",
        "lessor.cli.commands.describe:wait",
        "wait until a lease reaches a phase",
        """\
Wait until LEASE is in phase --for: Pending, Bound, Recycling, Released, Expired or
Quarantined for a cluster lease; Pending, Provisioning, Ready, Releasing, Released, Expired or
Quarantined for a Sandbox lease. Exit 0 when it is, 5 after --timeout, 1 when the lease ended
in another phase it will never leave.

examples:
  lessor lease ci-small --no-wait -o json | jq -r .id > id
  lessor wait "$(cat id)" --for Bound --timeout 10m && lessor kubeconfig "$(cat id)"
  lessor release pr-1234 && lessor wait pr-1234 --for Released""",
    )
    _lease_argument(wait)
    wait.add_argument("--for", dest="phase", required=True, metavar="PHASE")
    wait.add_argument("--timeout", default="10m", metavar="DURATION", help="default 10m")


def _target_argument(parser: argparse.ArgumentParser, dest: str, metavar: str = "NAME") -> None:
    """A configured target's name; Tab completes them from the config."""
    action = parser.add_argument(dest, metavar=metavar)
    action.completer = completion.targets  # type: ignore[attr-defined]


def _config(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = commands.add_parser(
        "config",
        help="named targets: view, edit, list, current, use, set, rename, delete",
        description=_with_examples(
            "config",
            "Named targets (endpoint and auth mode) in $XDG_CONFIG_HOME/lessor/"
            "config.json, default ~/.config/lessor/config.json, mode 0600.",
        ),
        formatter_class=_Formatter,
    )
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    view = actions.add_parser(
        "view", help="print the config (tokens redacted; JSON unless -o)", parents=[_output()]
    )
    view.add_argument("--raw", action="store_true", help="print tokens too")
    view.set_defaults(handler="lessor.cli.commands.config:view")
    actions.add_parser(
        "edit", help="edit in $VISUAL/$EDITOR; saved only if it validates"
    ).set_defaults(handler="lessor.cli.commands.config:edit")
    listing = actions.add_parser("list", help="list targets", parents=[_output(names=True)])
    listing.set_defaults(handler="lessor.cli.commands.config:list_targets")
    actions.add_parser(
        "current", help="print the current target's name", parents=[_output()]
    ).set_defaults(handler="lessor.cli.commands.config:current")
    use = actions.add_parser("use", help="switch the current target")
    _target_argument(use, "name")
    use.set_defaults(handler="lessor.cli.commands.config:use")
    rename = actions.add_parser(
        "rename", help="rename a target (refused onto an existing name); current follows it"
    )
    _target_argument(rename, "old", metavar="OLD")
    rename.add_argument("new", metavar="NEW")
    rename.set_defaults(handler="lessor.cli.commands.config:rename")
    delete = actions.add_parser(
        "delete", help="delete a target (the current one: no target is current then)"
    )
    _target_argument(delete, "name")
    delete.set_defaults(handler="lessor.cli.commands.config:delete")
    put = actions.add_parser(
        "set",
        help="create or replace a target",
        formatter_class=_Formatter,
        description="""\
Create or replace target NAME; the first target becomes the current one.

examples:
  lessor config set prod --endpoint https://lessor.example.com --auth oidc \\
      --oidc-issuer https://login.example.com --oidc-client-id lessor-cli
  lessor config set dev --endpoint http://127.0.0.1:8000 --auth ssh
  echo "$TOKEN" | lessor config set ci --endpoint https://lessor.example.com \\
      --auth token --token-stdin""",
    )
    put.add_argument("name", metavar="NAME")
    put.add_argument("--endpoint", required=True, metavar="URL", help="the service's base URL")
    put.add_argument(
        "--auth", required=True, choices=("ssh", "token", "oidc", "none"), help="how to log in"
    )
    put.add_argument(
        "--token-stdin", action="store_true", help="read a static token from stdin (auth token)"
    )
    put.add_argument("--ssh-key", metavar="FINGERPRINT|COMMENT", help="which agent key signs")
    put.add_argument("--oidc-issuer", metavar="URL", help="OIDC issuer (auth oidc)")
    put.add_argument("--oidc-client-id", metavar="ID", help="OIDC client id (auth oidc)")
    put.add_argument(
        "--oidc-scope", action="append", metavar="SCOPE", help="repeatable; default openid"
    )
    put.add_argument(
        "--ci-audience", metavar="AUD", help="login --ci: the audience asked of GitHub (lessor)"
    )
    put.add_argument(
        "--ci-token-variable",
        metavar="NAME",
        help="login --ci: GitLab's id_tokens variable (LESSOR_ID_TOKEN)",
    )
    put.add_argument("--ca-file", metavar="PEM", help="CA bundle that signed the endpoint's cert")
    put.set_defaults(handler="lessor.cli.commands.config:set_target")


def _sandbox(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    module = "lessor.cli.commands.sandbox"
    run = _command(
        commands,
        handler=f"{module}:run",
        name="run",
        summary="lease a sandbox, run one command, release it",
        description="Lease an executable resource from POOL, run COMMAND in it, release it even on"
        " failure or Ctrl-C, and exit with the command's exit code (124: timed out, 125:"
        " cancelled, 1: outcome unknown).",
    )
    _pool_argument(run)
    run.add_argument("--ttl", metavar="DURATION", help="lease TTL; default the pool's")
    _command_arguments(run)
    execute = _command(
        commands,
        "exec",
        f"{module}:execute",
        "run a command in a sandbox lease",
        "Run COMMAND (no shell) in the sandbox of LEASE, print its output as it comes and exit"
        " with its exit code; --detach prints the execution id instead.",
    )
    _lease_argument(execute)
    execute.add_argument("--detach", action="store_true", help="do not wait for the command")
    _command_arguments(execute)
    logs = _command(
        commands,
        "logs",
        f"{module}:logs",
        "read a sandbox's or an execution's output",
        "Print the log tail of LEASE, or the retained output of EXECUTION.",
    )
    _lease_argument(logs)
    logs.add_argument("execution", nargs="?", metavar="EXECUTION")
    logs.add_argument("-f", "--follow", action="store_true", help="until the execution ends")
    logs.add_argument(
        "--tail", type=int, metavar="N", help="the sandbox's last N lines (1-5000, default 100)"
    )
    logs.add_argument("-c", "--container", help="the sandbox's container (default: its only one)")
    cancel = _command(
        commands,
        "cancel",
        f"{module}:cancel",
        "cancel a running execution",
        "Cancel EXECUTION of LEASE.",
    )
    _lease_argument(cancel)
    cancel.add_argument("execution", metavar="EXECUTION")
    streams = "lessor.cli.commands.streams"
    attach = _command(
        commands,
        "attach",
        f"{streams}:attach",
        "interactive session in a sandbox",
        """\
Attach to the main process of the sandbox of LEASE: its output is printed, your input is
sent to it. On a terminal, the terminal is raw (Ctrl-C goes to the sandbox), its size follows
yours, and Ctrl-] detaches. Ends when the process closes the stream, the lease leaves Ready, or
the server's idle or duration limit is reached (exit 1 with the reason).""",
        prints=False,
    )
    _lease_argument(attach)
    attach.add_argument("-c", "--container", help="default: the pool's default container")
    forward = _command(
        commands,
        "port-forward",
        f"{streams}:port_forward",
        "forward a declared port of a sandbox",
        """\
Listen on LOCAL and forward each connection to REMOTE in the sandbox of LEASE. REMOTE is a port
the SandboxPool declares, by number or name; LOCAL 0 or empty picks a free port (printed).
Examples: 8080:80, 8080:http, :http, 5432. Ends with Ctrl-C, when the lease ends, or when your
grant of its pool is withdrawn.""",
        prints=False,
    )
    _lease_argument(forward)
    forward.add_argument("ports", metavar="LOCAL:REMOTE")
    forward.add_argument("--address", default="127.0.0.1", help="local address to listen on")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lessor",
        description="Lease ephemeral Kubernetes clusters and agent sandboxes from warm pools.",
        epilog=EPILOG,
        parents=[_common()],
        formatter_class=_Formatter,
    )
    parser.set_defaults(target=None, endpoint=None)
    parser.add_argument("--version", action="version", version=f"lessor {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _command(
        commands,
        "status",
        "lessor.cli.commands.status:status",
        "endpoint status, auth methods, pools and your active leases",
        "Show the endpoint's version, auth methods, pools and, with credentials, your session"
        " and active leases. Works without logging in.",
        names=True,
    )
    _command(
        commands,
        "version",
        "lessor.cli.commands.status:version",
        "local version and the endpoint's, when reachable",
        "Print the CLI's version (with the git commit when it runs from a checkout) and,"
        " when reachable, the endpoint's.",
    )
    login = _command(
        commands,
        "login",
        "lessor.cli.commands.login:login",
        "log in and keep a session token",
        """\
Exchange the target's credential for a session token, stored per endpoint in
$XDG_CONFIG_HOME/lessor/sessions.json (mode 0600) and used by later commands.

  ssh    the ssh-agent's Ed25519 key signs the login request (SSH_AUTH_SOCK)
  token  the static token from LESSOR_TOKEN or the config
  oidc   a browser login (authorization code with PKCE, loopback redirect), or the device
         flow with --device or when no browser can be opened; with a refresh token from the
         provider (scope offline_access), the session renews itself when it ends
  --ci   the CI job's own ID token: GitHub Actions' runner is asked for one (audience from
         the target's --ci-audience, default lessor; the job needs `permissions: id-token:
         write`), GitLab CI's is read from the variable its `id_tokens:` names (the target's
         --ci-token-variable, default LESSOR_ID_TOKEN); renewed from the job while it runs""",
    )
    login.add_argument("--ttl", metavar="DURATION", help="session lifetime (server default 12h)")
    login.add_argument("--device", action="store_true", help="oidc: use the device-code flow")
    login.add_argument(
        "--ci", action="store_true", help="log in with the CI job's ID token (GitHub, GitLab)"
    )
    login.add_argument(
        "--timeout", metavar="DURATION", help="oidc: how long to wait for the browser (5m)"
    )
    _command(
        commands,
        "logout",
        "lessor.cli.commands.login:logout",
        "revoke and delete the session and the stored credentials",
        "Revoke the session on the server and delete it locally, with the static token the "
        "target stores in config.json (LESSOR_TOKEN and ssh-agent keys are not lessor's to "
        "delete).",
        prints=False,
    )
    _lease(commands)
    _with_lease(commands)
    release = _command(
        commands,
        "release",
        "lessor.cli.commands.leases:release",
        "release a lease now",
        "Release LEASE: its cluster is destroyed and the pool refills (a sandbox lease: its"
        " sandbox is deleted). Repeating it is safe.",
    )
    _lease_argument(release)
    extend = _command(
        commands,
        "extend",
        "lessor.cli.commands.leases:extend",
        "extend a lease's expiry",
        "Move LEASE's expiry later by --ttl, within the policy's maxExtensions.",
    )
    _lease_argument(extend)
    extend.add_argument("--ttl", required=True, metavar="DURATION", help="how much later, e.g. 30m")
    diagnostics = _command(
        commands,
        "diagnostics",
        "lessor.cli.commands.diagnostics:diagnostics",
        "the diagnostics bundle of an ended lease",
        """\
Print a pre-signed URL of LEASE's diagnostics bundle, captured from its cluster when the lease
ended (on pools with diagnostics configured): a .tar.gz of the cluster's nodes, pods, events of
every namespace, the last lines of each container's log, and lessor's record of the lease.
Exit 4 when no bundle exists (none configured, not captured yet, or expired from the bucket).

examples:
  lessor diagnostics pr-1234
  lessor diagnostics lease-3f2a9c --download              # lessor-diagnostics-<LEASE>.tar.gz
  lessor diagnostics pr-1234 --download /tmp/bundle.tar.gz""",
    )
    _lease_argument(diagnostics)
    diagnostics.add_argument(
        "--download",
        nargs="?",
        const="",
        metavar="PATH",
        help="write the bundle to PATH (lessor-diagnostics-<LEASE>.tar.gz) instead",
    )
    _coming_back(commands)
    shell = _command(
        commands,
        "completion",
        "lessor.cli.completion:script",
        "print the shell completion script for bash, zsh or fish",
        """\
Print the script that makes SHELL complete lessor's commands and flags, and the ids and aliases
of your leases and the pools you may lease from (asked of the server, 5 s at most).

examples:
  source <(lessor completion bash)                     # in ~/.bashrc
  lessor completion zsh > "${fpath[1]}/_lessor"       # zsh (compinit)
  lessor completion fish > ~/.config/fish/completions/lessor.fish""",
        prints=False,
    )
    shell.add_argument("shell", choices=completion.SHELLS, metavar="SHELL")
    _config(commands)
    _sandbox(commands)
    for name, what in (("apiserver", "the HTTP API (gunicorn)"), ("operator", "the operator")):
        server = commands.add_parser(
            name, help=f"run {what}; `lessor {name} --help`", add_help=False
        )
        server.set_defaults(handler=None)
    return parser
