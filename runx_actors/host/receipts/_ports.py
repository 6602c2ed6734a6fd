"""What the governed host needs of a signing identity and of a receipt store (loop-host
§4.4, §4.5, §5.2), as Protocols: :class:`~._signing.Signer` and
:class:`~._store.ReceiptStore` are the implementations; ``HostConfig.signer`` /
``HostConfig.receipts`` accept anything with these methods (a test's wrapper, another
store)."""

from __future__ import annotations

from typing import Protocol

from ._model import Issuer, Receipt, Signature
from ._signing import Keyring
from ._store import PutOutcome

__all__ = ["ReceiptSigner", "ReceiptRepository"]


class ReceiptSigner(Protocol):
    """A receipt signing identity as sealing uses it (§4.4; ``Signer`` is one)."""

    @property
    def issuer(self) -> Issuer:
        """The receipt's ``issuer`` (type, kid, ``public_key_sha256``)."""
        ...

    @property
    def is_local_development(self) -> bool:
        """True for the ``sig:<digest>`` identity (verified in local-development mode)."""
        ...

    def sign(self, digest: str) -> Signature:
        """The signature of the 71-character *digest* string (§4.4 step 4)."""
        ...

    def keyring(self) -> Keyring:
        """A keyring trusting this identity's key (a sealed receipt is verified at once)."""
        ...


class ReceiptRepository(Protocol):
    """A write-once receipt store as the host uses it (§5.2; ``ReceiptStore`` is one).
    Every method blocks (the host calls them in a worker thread) and verifies."""

    def put(self, receipt: Receipt) -> PutOutcome:
        """Store a sealed *receipt* once (an identical one again is a no-op).

        Raises ReceiptInvalidError, ReceiptAlreadyExistsError (another receipt with its
        id), OSError."""
        ...

    def get(self, receipt_id: str) -> Receipt:
        """The stored receipt *receipt_id*, verified. Raises ReceiptError (not found,
        corrupt, invalid)."""
        ...

    def find(self, intent_key: str, uri: str) -> tuple[Receipt, ...]:
        """The stored receipts of idempotency *intent_key* and subject *uri* (adoption
        after a crash, §2.6)."""
        ...
