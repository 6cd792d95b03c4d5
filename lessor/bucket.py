"""One S3-compatible bucket, as the operator (upload, check) and the API server (pre-signed
URLs) use it for diagnostics bundles.

boto3 rather than a hand-written SigV4: it is the reference client of the protocol, and every
S3-compatible store (MinIO, Ceph, R2, GCS's interoperability mode) is tested against it. Calls
are blocking (the operator runs them in a thread, the API server's gevent workers yield on the
socket); every one is bounded by connect and read timeouts and is tried once: the reconcilers
and clients retry, so a store that is down costs one timeout, not botocore's backoff.

Errors are reduced to a reason a pool's condition can carry and a message with no credential
in it (botocore's messages name the bucket and the operation, never a key).
"""

from __future__ import annotations

import base64
import binascii
import datetime
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal

import botocore.exceptions

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

# Keys of a credentials Secret: the names the AWS tools read from the environment, so one Secret
# serves lessor and anything else an administrator points at the same bucket.
ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 - a key name
SESSION_TOKEN = "AWS_SESSION_TOKEN"  # noqa: S105 - a key name
# The longest a SigV4 pre-signed URL can be valid.
MAX_URL_TTL = datetime.timedelta(days=7)

Reason = Literal[
    "CredentialsInvalid", "AccessDenied", "BucketNotFound", "EndpointUnreachable", "StoreError"
]


class BucketError(Exception):
    """The store refused or could not be reached; `reason` is a condition reason."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.message = message


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_secret_data(cls, data: dict[str, str]) -> Credentials:
        """From a Secret's `data` (base64 values); BucketError when a key is missing or bad."""
        try:
            values = {key: base64.b64decode(value).decode() for key, value in data.items()}
        except (binascii.Error, UnicodeDecodeError) as error:
            raise BucketError("CredentialsInvalid", "the credentials are not valid text") from error
        missing = [key for key in (ACCESS_KEY_ID, SECRET_ACCESS_KEY) if not values.get(key)]
        if missing:
            raise BucketError("CredentialsInvalid", f"the credentials Secret lacks {missing}")
        return cls(values[ACCESS_KEY_ID], values[SECRET_ACCESS_KEY], values.get(SESSION_TOKEN))


@dataclass(frozen=True)
class Location:
    bucket: str
    region: str = "us-east-1"
    endpoint: str | None = None  # None: AWS S3 itself


class Bucket:
    def __init__(
        self, location: Location, credentials: Credentials | None, *, timeout: float = 10.0
    ) -> None:
        # boto3 is imported when a store is first used: it costs every process that may never
        # use one (an operator or API server without diagnostics) 0.4 s of CPU at start.
        import boto3.session  # noqa: PLC0415
        import botocore.config  # noqa: PLC0415

        self.location = location
        config = botocore.config.Config(
            region_name=location.region,
            signature_version="s3v4",
            connect_timeout=timeout,
            read_timeout=timeout,
            retries={"max_attempts": 1, "mode": "standard"},
            # Path-style for any other store (a bucket name need not be a DNS label there, and
            # an IP endpoint has no subdomains); AWS itself prefers virtual-hosted.
            s3={"addressing_style": "path" if location.endpoint else "virtual"},
        )
        self._client: S3Client = boto3.session.Session().client(
            "s3",
            endpoint_url=location.endpoint,
            aws_access_key_id=credentials.access_key_id if credentials else None,
            aws_secret_access_key=credentials.secret_access_key if credentials else None,
            aws_session_token=credentials.session_token if credentials else None,
            config=config,
        )

    def check(self) -> None:
        """That the bucket exists and these credentials reach it (HeadBucket)."""
        self._call("HeadBucket", self._client.head_bucket, Bucket=self.location.bucket)

    def put(
        self,
        key: str,
        body: IO[bytes],
        *,
        encryption: Literal["AES256", "aws:kms"] | None = None,
        kms_key_id: str | None = None,
    ) -> None:
        extra: dict[str, Any] = {"ContentType": "application/gzip"}
        if encryption:
            extra["ServerSideEncryption"] = encryption
        if kms_key_id:
            extra["SSEKMSKeyId"] = kms_key_id
        self._call(
            "PutObject",
            self._client.put_object,
            Bucket=self.location.bucket,
            Key=key,
            Body=body,
            **extra,
        )

    def exists(self, key: str) -> bool:
        """Whether the object is there (the bucket's lifecycle rule may have expired it)."""
        try:
            self._call("HeadObject", self._client.head_object, Bucket=self.location.bucket, Key=key)
        except BucketError as error:
            if error.reason == "BucketNotFound":  # a missing key answers 404 like a bucket
                return False
            raise
        return True

    def presigned_get(self, key: str, ttl: datetime.timedelta) -> str:
        """A GET URL for the object that anyone holding it can use until `ttl` passes; made
        locally (a signature), no request to the store."""
        seconds = int(min(ttl, MAX_URL_TTL).total_seconds())
        return self._client.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.location.bucket, "Key": key},
            ExpiresIn=max(1, seconds),
        )

    def _call(self, operation: str, method: Any, **params: Any) -> Any:
        where = self.location.endpoint or f"S3 in {self.location.region}"
        try:
            return method(**params)
        except botocore.exceptions.ClientError as error:
            raise _client_error(error, operation, self.location.bucket) from None
        except (
            botocore.exceptions.EndpointConnectionError,
            botocore.exceptions.ConnectTimeoutError,
            botocore.exceptions.ReadTimeoutError,
            botocore.exceptions.ConnectionClosedError,
        ) as error:
            raise BucketError(
                "EndpointUnreachable", f"{operation}: {where} cannot be reached ({error})"
            ) from None
        except botocore.exceptions.NoCredentialsError:
            raise BucketError(
                "CredentialsInvalid",
                f"{operation}: no credentials (set credentialsSecretRef, or give the operator "
                "and the API server their own)",
            ) from None
        except botocore.exceptions.BotoCoreError as error:
            raise BucketError("StoreError", f"{operation}: {error}") from None


def _client_error(
    error: botocore.exceptions.ClientError, operation: str, bucket: str
) -> BucketError:
    details = error.response.get("Error", {})
    code = str(details.get("Code", ""))
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code.startswith("kms") or "KMS" in code:  # AWS: KMS.NotFoundException; MinIO: kms:...
        return BucketError("StoreError", f"{operation}: the KMS key was refused ({code})")
    if code in ("NoSuchBucket", "NoSuchKey", "404", "NotFound"):
        return BucketError("BucketNotFound", f"{operation}: no bucket or object there in {bucket}")
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"):
        return BucketError(
            "CredentialsInvalid", f"{operation}: the store refused the credentials ({code})"
        )
    if code in ("AccessDenied", "403", "Forbidden") or status == 403:
        return BucketError(
            "AccessDenied",
            f"{operation}: access to {bucket} denied (unknown credentials, or they lack the"
            " permission)",
        )
    return BucketError(
        "StoreError", f"{operation}: {code or status} {details.get('Message', '')}".strip()
    )
