"""What lessor.bucket decides without a store: credentials from a Secret, and the URL's life."""

from __future__ import annotations

import base64
import datetime
import urllib.parse

import botocore.exceptions
import pytest

from lessor.bucket import Bucket, BucketError, Credentials, Location, _client_error


def _data(**values: str) -> dict[str, str]:
    return {key: base64.b64encode(value.encode()).decode() for key, value in values.items()}


def test_credentials_come_from_the_aws_key_names() -> None:
    credentials = Credentials.from_secret_data(
        _data(AWS_ACCESS_KEY_ID="id", AWS_SECRET_ACCESS_KEY="s3cr3t", AWS_SESSION_TOKEN="t")
    )
    assert (credentials.access_key_id, credentials.session_token) == ("id", "t")
    assert "s3cr3t" not in repr(credentials)


@pytest.mark.parametrize(
    "data",
    [_data(AWS_ACCESS_KEY_ID="id"), _data(accessKey="id", secretKey="s3cr3t"), {"x": "!!"}],
    ids=["no-secret-key", "other-names", "not-base64"],
)
def test_a_secret_without_usable_credentials_is_refused_without_echoing_it(
    data: dict[str, str],
) -> None:
    with pytest.raises(BucketError) as raised:
        Credentials.from_secret_data(data)
    assert raised.value.reason == "CredentialsInvalid"
    assert "s3cr3t" not in raised.value.message


def test_a_url_lives_its_ttl_and_never_past_the_seven_days_sigv4_allows() -> None:
    bucket = Bucket(
        Location("bundles", endpoint="http://store.invalid:9000"), Credentials("id", "key")
    )

    def expires(ttl: datetime.timedelta) -> str:
        url = bucket.presigned_get("ns/lease/uid.tar.gz", ttl)
        assert url.startswith("http://store.invalid:9000/bundles/ns/lease/uid.tar.gz?")
        return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["X-Amz-Expires"][0]

    assert expires(datetime.timedelta(minutes=15)) == "900"
    assert expires(datetime.timedelta(days=30)) == str(7 * 24 * 3600)


@pytest.mark.parametrize(
    ("code", "status", "reason"),
    [
        ("kms:KeyNotFound", 404, "StoreError"),  # MinIO's answer to an unknown kmsKeyId
        ("NoSuchBucket", 404, "BucketNotFound"),
        ("404", 404, "BucketNotFound"),  # a HEAD's: no body to carry a code
        ("403", 403, "AccessDenied"),
        ("InvalidAccessKeyId", 403, "CredentialsInvalid"),
    ],
)
def test_store_answers_become_the_reason_a_condition_carries(
    code: str, status: int, reason: str
) -> None:
    answer = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    error = _client_error(botocore.exceptions.ClientError(answer, "PutObject"), "PutObject", "b")  # type: ignore[arg-type]
    assert error.reason == reason
