"""Errors of the receipt layer (loop-host §4.4-§5.4).

Every class derives from :class:`runx_actors.RunxError` through the grouping base
:class:`ReceiptError`. The names the design gives (``ReceiptAlreadyExists``,
``ReceiptIndexStale``, ``ReceiptAmbiguous``, ``ReceiptCorrupt``) carry the house ``Error``
suffix; each class keeps the design's spelling in its ``code`` class attribute. Errors carry
the data needed to act on them as keyword attributes (``receipt_id``, ``findings``,
``directory``, ``reason`` …); tests check attributes, not message text.
"""

from __future__ import annotations

from typing import ClassVar

from runx_actors.protocol.errors import RunxError

__all__ = [
    "ReceiptError",
    "ReceiptCanonicalizationError",
    "SigningConfigError",
    "KeyringConfigError",
    "ReceiptSealError",
    "ReceiptInvalidError",
    "ReceiptNotFoundError",
    "ReceiptCorruptError",
    "ReceiptAmbiguousError",
    "ReceiptAlreadyExistsError",
    "ReceiptIndexStaleError",
    "ReceiptDirectoryNotFoundError",
    "ReceiptInputError",
]


class ReceiptError(RunxError):
    """Grouping base of the receipt errors (for ``except`` clauses only)."""

    _abstract = True
    #: The design's name for this failure (loop-host §5), or the class name.
    code: ClassVar[str] = "ReceiptError"


class ReceiptCanonicalizationError(ReceiptError, TypeError):
    """A value cannot be written in ``runx.receipt.c14n.v1`` (§4.1): a non-integral,
    non-finite or unsafe float (sealer), a lone surrogate, a non-string key or a non-JSON
    type. It is a ``TypeError``, as §4.1 requires for rejected floats. Attributes:
    ``reason``, ``path`` (JSON pointer of the offending value)."""

    code = "ReceiptCanonicalizationError"


class SigningConfigError(ReceiptError):
    """The ``RUNX_RECEIPT_SIGN_*`` identity is missing or misconfigured (§4.5).

    The message always starts with the §4.5 sentence (``SIGNING_REQUIRED_MESSAGE``).
    Attribute ``reason``: ``missing`` (none of the three variables is set), ``partial``,
    ``bad_seed``, ``bad_issuer_type`` or ``bad_kid``. Governed paths exit 1 on it.
    """

    code = "SigningConfigError"


class KeyringConfigError(ReceiptError):
    """The verification keyring cannot be built (§4.6): ``RUNX_RECEIPT_VERIFY_KID`` without
    ``RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64`` (or the reverse), a key that is not 32
    bytes, or one kid mapped to two keys. Attribute ``reason``."""

    code = "KeyringConfigError"


class ReceiptSealError(ReceiptError):
    """Internal error: a receipt failed verification right after sealing (§4.4 step 5).
    Nothing was written. Attribute ``findings``."""

    code = "ReceiptSealError"


class ReceiptInvalidError(ReceiptError):
    """``put`` refused a receipt that does not verify (§5.2, §4.6). Nothing was written.
    Attributes: ``receipt_id``, ``findings``."""

    code = "ReceiptInvalid"


class ReceiptNotFoundError(ReceiptError):
    """No file holds this receipt id (§5.2 ``get``; ``verify <receipt-id>`` exits 1).
    Attributes: ``receipt_id``, ``directory``."""

    code = "ReceiptNotFound"


class ReceiptCorruptError(ReceiptError):
    """``get`` read a file that fails the stem, parse, content-address or proof checks
    (§5.2). Attributes: ``receipt_id``, ``file_name``, ``reason`` (``unreadable``,
    ``unparseable``, ``stem_mismatch`` or ``verification``), ``findings``."""

    code = "ReceiptCorrupt"


class ReceiptAmbiguousError(ReceiptError):
    """Two files hold the same receipt id with different bytes (§5.1). Attributes:
    ``receipt_id``, ``file_names``."""

    code = "ReceiptAmbiguous"


class ReceiptAlreadyExistsError(ReceiptError):
    """``put`` of an id already stored with different bytes (§5.2 write-once). Nothing
    was written. Attributes: ``receipt_id``, ``file_name``."""

    code = "ReceiptAlreadyExists"


class ReceiptIndexStaleError(ReceiptError):
    """``index.json`` disagrees with the directory (§5.1). Message
    ``receipt store index is stale: <dir>``; attributes ``directory`` and ``hint``
    (``delete <dir>/index.json to rebuild it``)."""

    code = "ReceiptIndexStale"


class ReceiptDirectoryNotFoundError(ReceiptError):
    """The receipt directory to verify does not exist or is not a directory (§5.4, exit
    1). Attribute ``directory``."""

    code = "ReceiptDirectoryNotFound"


class ReceiptInputError(ReceiptError):
    """Single-mode input is unreadable, not JSON, not an object or over 10 MiB (§5.4,
    exit 1). Attributes: ``source``, ``reason``."""

    code = "ReceiptInputError"
