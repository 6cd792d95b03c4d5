"""`lessor diagnostics`: the link to a lease's diagnostics bundle, or the bundle itself.

The URL is pre-signed by the server and leads straight to the object store, so the download
goes there with no lessor credential (urllib, which honours HTTPS_PROXY and NO_PROXY). It is
written beside its destination and renamed into place: an interrupted download leaves no
half-written archive under the expected name.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from lessor.cli import context, output
from lessor.cli.answers import as_sent
from lessor.cli.errors import SERVER, CliError
from lessor.protocol.responses import DiagnosticsBundle

DOWNLOAD_TIMEOUT = 60.0


def diagnostics(args: argparse.Namespace) -> int:
    client = context.client(args)
    bundle = client.get_model(f"/v1/leases/{args.lease_id}/diagnostics", DiagnosticsBundle)
    written = None
    if args.download is not None:
        written = Path(args.download or f"lessor-diagnostics-{args.lease_id}.tar.gz")
        download(bundle.url, written)
    if output.wants_json(args):
        output.emit(args, {**as_sent(bundle), **({"file": str(written)} if written else {})})
        return 0
    if written is not None:
        print(f"wrote {written} ({bundle.size_bytes} bytes)")
    else:
        print(bundle.url)
        print(f"valid {output.until(bundle.expires_at)}, {bundle.size_bytes} bytes")
    if bundle.truncated:
        print("note: the bundle is incomplete (the pool's size or time limit); see capture.json")
    return 0


def download(url: str, path: Path) -> None:
    if urllib.parse.urlsplit(url).scheme not in ("https", "http"):
        # urllib would open file:, ftp: and data: URLs as well: a server's answer must not
        # make the CLI read a local file into the bundle's place (review N11).
        raise CliError("the server's bundle URL is not http(s); not downloading it", SERVER)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as answer:  # noqa: S310 - the server's https or http store URL
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as file:
                shutil.copyfileobj(answer, file)
        temporary.replace(path)
    except urllib.error.HTTPError as error:
        raise CliError(f"the object store answered {error.code} for the bundle's URL") from None
    except (urllib.error.URLError, OSError) as error:
        raise CliError(f"the bundle could not be downloaded to {path}: {error}") from None
    finally:
        temporary.unlink(missing_ok=True)
