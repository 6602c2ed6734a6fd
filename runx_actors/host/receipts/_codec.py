"""JSON conversion of the receipt model (loop-host §4.2): one private cattrs converter.

Unstructuring writes the §4.2 wire shape: enums as their values, tuples as arrays, the
optional fields of References and of ``lineage`` (and ``authority.mandate_ref``) omitted
when unset, ``attenuation``'s two fields always present (``null`` when unset), and the
draft's ``receipt_class`` written as ``class``. Structuring builds the typed *views* of a
sealed receipt; it ignores keys it does not model, because the receipt's bytes, not the
view, are what is hashed and verified.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from ._json import FrozenMap, thaw_json
from ._model import (
    Attenuation,
    Authority,
    Commitment,
    Enforcement,
    Idempotency,
    Issuer,
    Lineage,
    ReceiptDraft,
    Reference,
    Seal,
    Signature,
    Subject,
)

__all__ = ["unstructure", "structure", "draft_to_json"]

_T = TypeVar("_T")

# Resolve the string annotations now, while the classes still live in ``_model``: the
# package later re-homes them to ``runx_actors.host.receipts`` (whose namespace does not
# hold ``Any`` and friends), and cattrs resolves type hints lazily.
for _cls in (Reference, Issuer, Signature, Idempotency, Commitment, Subject, Attenuation,
             Enforcement, Authority, Seal, Lineage, ReceiptDraft):
    attrs.resolve_types(_cls)

_converter = cattrs.Converter()
_converter.register_unstructure_hook(FrozenMap, thaw_json)
_converter.register_unstructure_hook(tuple, lambda value: [_converter.unstructure(v)
                                                            for v in value])


def _omit_when_unset(cls: type[Any], *names: str) -> None:
    overrides: dict[str, Any] = {name: override(omit_if_default=True) for name in names}
    _converter.register_unstructure_hook(
        cls, make_dict_unstructure_fn(cls, _converter, **overrides)
    )


_omit_when_unset(
    Reference, "provider", "locator", "label", "observed_at", "schema", "proof_kind"
)
_omit_when_unset(Lineage, "parent", "previous", "resume_ref")
_omit_when_unset(Authority, "mandate_ref")


def unstructure(value: Any) -> Any:
    """Return the JSON data of a model value (records, enums, tuples, frozen JSON)."""
    return _converter.unstructure(value)


def structure(data: Any, cls: type[_T]) -> _T:
    """Build the typed view *cls* from JSON *data* (extra keys ignored).

    Raises:
        cattrs.BaseValidationError: *data* does not have the shape of *cls*.
    """
    return _converter.structure(data, cls)


def draft_to_json(draft: ReceiptDraft) -> dict[str, Any]:
    """Return the JSON object of an unsealed receipt (§4.4 step 1), without ``issuer``,
    ``id``, ``digest`` and ``signature``. ``signals``, ``decisions`` and ``acts`` are
    always present (empty arrays); ``lineage`` is omitted when the draft has none.
    """
    body: dict[str, Any] = {
        "schema": "runx.receipt.v1",
        "created_at": draft.created_at,
        "canonicalization": "runx.receipt.c14n.v1",
        "idempotency": unstructure(draft.idempotency),
        "class": draft.receipt_class.value,
        "subject": unstructure(draft.subject),
        "authority": unstructure(draft.authority),
        "seal": unstructure(draft.seal),
        # always written, as upstream's real receipts do (§4.2); this host records no
        # signals, decisions or acts of its own
        "signals": [],
        "decisions": [],
        "acts": [],
    }
    if draft.lineage is not None:
        body["lineage"] = unstructure(draft.lineage)
    return body
