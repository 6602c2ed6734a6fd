"""Receipts: sealing, signing, verification, the write-once store and chain/tree
verification (loop-host §4, §5; architecture §6).

* **Canonical form** ``runx.receipt.c14n.v1`` (§4.1): :func:`receipt_canonical_json`
  (``C``), :func:`receipt_hash` (``H``), :func:`bytes_hash` (``Hb``).
* **Model** (§4.2, §4.3): :class:`ReceiptDraft` and its typed parts, the sealed
  :class:`Receipt`, and the §4.3 content helpers (:func:`step_locator`,
  :func:`graph_locator`, :func:`fact_log_commitment`, …).
* **Sealing and identity** (§4.4, §4.5): :func:`seal_receipt`, :class:`Signer`,
  :func:`require_signer`, :func:`keyring_from_env`.
* **Verification** (§4.6): :class:`Verifier` → :class:`ReceiptVerification` with every
  :class:`Finding`.
* **Store** (§5.1, §5.2): :class:`ReceiptStore` (``put``/``get``/``list``/``index``/
  ``find``).
* **What the host needs** of an identity and a store: the Protocols
  :class:`ReceiptSigner` (``Signer`` is one) and :class:`ReceiptRepository`
  (``ReceiptStore`` is one), the types of ``HostConfig.signer`` / ``.receipts``.
* **Directory, chain and single verification** (§5.4, §2.5): :func:`verify_directory`,
  :func:`verify_chain`, :func:`verify_receipt_bytes`; ``verify`` command:
  :func:`verify_command` with :func:`format_report` / :func:`format_verdict`.

Everything here is synchronous; the store blocks on the file system (run it in a worker
thread under trio).
"""

from ._c14n import C14N_ID as C14N_ID
from ._c14n import bytes_hash as bytes_hash
from ._c14n import parse_receipt_json as parse_receipt_json
from ._c14n import receipt_canonical_json as receipt_canonical_json
from ._c14n import receipt_hash as receipt_hash
from ._chain import ChainReport as ChainReport
from ._chain import verify_chain as verify_chain
from ._command import CommandResult as CommandResult
from ._command import verify_command as verify_command
from ._content import ENFORCEMENT_PROFILE_ID as ENFORCEMENT_PROFILE_ID
from ._content import LOCAL_RUNTIME_PRINCIPAL as LOCAL_RUNTIME_PRINCIPAL
from ._content import claim_content_hash as claim_content_hash
from ._content import commitments_for as commitments_for
from ._content import enforcement_profile_hash as enforcement_profile_hash
from ._content import fact_log_commitment as fact_log_commitment
from ._content import format_created_at as format_created_at
from ._content import graph_disposition as graph_disposition
from ._content import graph_locator as graph_locator
from ._content import graph_reason_code as graph_reason_code
from ._content import graph_step_reason_code as graph_step_reason_code
from ._content import harness_uri as harness_uri
from ._content import local_runtime_authority as local_runtime_authority
from ._content import run_binding_commitment as run_binding_commitment
from ._content import seal_summary as seal_summary
from ._content import step_locator as step_locator
from ._content import step_reason_code as step_reason_code
from ._errors import KeyringConfigError as KeyringConfigError
from ._errors import ReceiptAlreadyExistsError as ReceiptAlreadyExistsError
from ._errors import ReceiptAmbiguousError as ReceiptAmbiguousError
from ._errors import ReceiptCanonicalizationError as ReceiptCanonicalizationError
from ._errors import ReceiptCorruptError as ReceiptCorruptError
from ._errors import ReceiptDirectoryNotFoundError as ReceiptDirectoryNotFoundError
from ._errors import ReceiptError as ReceiptError
from ._errors import ReceiptIndexStaleError as ReceiptIndexStaleError
from ._errors import ReceiptInputError as ReceiptInputError
from ._errors import ReceiptInvalidError as ReceiptInvalidError
from ._errors import ReceiptNotFoundError as ReceiptNotFoundError
from ._errors import ReceiptSealError as ReceiptSealError
from ._errors import SigningConfigError as SigningConfigError
from ._files import INDEX_FILE as INDEX_FILE
from ._files import LOCK_FILE as LOCK_FILE
from ._files import legacy_file_name as legacy_file_name
from ._files import resolve_receipt_dir as resolve_receipt_dir
from ._findings import INFORMATIONAL_CODES as INFORMATIONAL_CODES
from ._findings import Finding as Finding
from ._findings import FindingCode as FindingCode
from ._format import format_report as format_report
from ._format import format_verdict as format_verdict
from ._format import report_to_json as report_to_json
from ._format import verdict_to_json as verdict_to_json
from ._json import FrozenMap as FrozenMap
from ._model import RECEIPT_SCHEMA as RECEIPT_SCHEMA
from ._model import Attenuation as Attenuation
from ._model import Authority as Authority
from ._model import Commitment as Commitment
from ._model import Disposition as Disposition
from ._model import Enforcement as Enforcement
from ._model import Idempotency as Idempotency
from ._model import Issuer as Issuer
from ._model import IssuerType as IssuerType
from ._model import Lineage as Lineage
from ._model import ProofKind as ProofKind
from ._model import Receipt as Receipt
from ._model import ReceiptClass as ReceiptClass
from ._model import ReceiptDraft as ReceiptDraft
from ._model import Reference as Reference
from ._model import Seal as Seal
from ._model import Signature as Signature
from ._model import Subject as Subject
from ._model import SubjectKind as SubjectKind
from ._model import is_receipt_id as is_receipt_id
from ._model import receipt_file_name as receipt_file_name
from ._model import receipt_uri as receipt_uri
from ._ports import ReceiptRepository as ReceiptRepository
from ._ports import ReceiptSigner as ReceiptSigner
from ._seal import seal_receipt as seal_receipt
from ._signing import DEMO_KID as DEMO_KID
from ._signing import DEMO_SEED_BASE64 as DEMO_SEED_BASE64
from ._signing import SIGNING_REQUIRED_MESSAGE as SIGNING_REQUIRED_MESSAGE
from ._signing import Keyring as Keyring
from ._signing import Signer as Signer
from ._signing import demo_signer_from_env as demo_signer_from_env
from ._signing import keyring_from_env as keyring_from_env
from ._signing import require_signer as require_signer
from ._signing import signer_from_env as signer_from_env
from ._single import MAX_SINGLE_INPUT_BYTES as MAX_SINGLE_INPUT_BYTES
from ._single import VERDICT_SCHEMA as VERDICT_SCHEMA
from ._single import Verdict as Verdict
from ._single import read_receipt_input as read_receipt_input
from ._single import verify_receipt_bytes as verify_receipt_bytes
from ._store import INDEX_SCHEMA as INDEX_SCHEMA
from ._store import IndexEntry as IndexEntry
from ._store import PutOutcome as PutOutcome
from ._store import ReceiptIndex as ReceiptIndex
from ._store import ReceiptStore as ReceiptStore
from ._tree import EXIT_ERROR as EXIT_ERROR
from ._tree import EXIT_INVALID as EXIT_INVALID
from ._tree import EXIT_OK as EXIT_OK
from ._tree import EXIT_USAGE as EXIT_USAGE
from ._tree import MAX_CHILDREN as MAX_CHILDREN
from ._tree import MAX_TREE_DEPTH as MAX_TREE_DEPTH
from ._tree import TreeReport as TreeReport
from ._tree import UnreadableFile as UnreadableFile
from ._tree import VerificationReport as VerificationReport
from ._tree import verify_directory as verify_directory
from ._verify import ReceiptVerification as ReceiptVerification
from ._verify import SignatureMode as SignatureMode
from ._verify import SignatureStatus as SignatureStatus
from ._verify import Verifier as Verifier
from ._verify import body_digest as body_digest
from ._verify import content_address as content_address

__all__ = [
    # canonical form (§4.1)
    "C14N_ID", "receipt_canonical_json", "receipt_hash", "bytes_hash", "parse_receipt_json",
    # model (§4.2)
    "RECEIPT_SCHEMA", "Disposition", "IssuerType", "ReceiptClass", "SubjectKind",
    "ProofKind", "Reference", "Issuer", "Signature", "Idempotency", "Commitment",
    "Subject", "Attenuation", "Enforcement", "Authority", "Seal", "Lineage",
    "ReceiptDraft", "Receipt", "FrozenMap", "receipt_uri", "receipt_file_name",
    "is_receipt_id",
    # content (§4.3)
    "ENFORCEMENT_PROFILE_ID", "LOCAL_RUNTIME_PRINCIPAL", "format_created_at",
    "harness_uri", "step_locator", "graph_locator", "claim_content_hash",
    "fact_log_commitment", "run_binding_commitment", "commitments_for", "enforcement_profile_hash",
    "local_runtime_authority", "seal_summary", "step_reason_code",
    "graph_step_reason_code", "graph_reason_code", "graph_disposition",
    # sealing and identity (§4.4, §4.5)
    "seal_receipt", "Signer", "Keyring", "SIGNING_REQUIRED_MESSAGE", "DEMO_KID",
    "DEMO_SEED_BASE64", "signer_from_env", "require_signer", "demo_signer_from_env",
    "keyring_from_env", "ReceiptSigner", "ReceiptRepository",
    # verification (§4.6)
    "SignatureMode", "SignatureStatus", "Verifier", "ReceiptVerification", "Finding",
    "FindingCode", "INFORMATIONAL_CODES", "body_digest", "content_address",
    # store (§5.1, §5.2)
    "ReceiptStore", "PutOutcome", "IndexEntry", "ReceiptIndex", "INDEX_SCHEMA",
    "INDEX_FILE", "LOCK_FILE", "legacy_file_name", "resolve_receipt_dir",
    # directory, chain, single verification and the verify command (§5.4, §2.5, §9)
    "verify_directory", "VerificationReport", "TreeReport", "UnreadableFile",
    "MAX_TREE_DEPTH", "MAX_CHILDREN", "EXIT_OK", "EXIT_ERROR", "EXIT_INVALID",
    "EXIT_USAGE", "verify_chain", "ChainReport", "verify_receipt_bytes",
    "read_receipt_input", "Verdict", "VERDICT_SCHEMA", "MAX_SINGLE_INPUT_BYTES",
    "verify_command", "CommandResult", "format_report", "format_verdict",
    "report_to_json", "verdict_to_json",
    # errors
    "ReceiptError", "ReceiptCanonicalizationError", "SigningConfigError",
    "KeyringConfigError", "ReceiptSealError", "ReceiptInvalidError",
    "ReceiptNotFoundError", "ReceiptCorruptError", "ReceiptAmbiguousError",
    "ReceiptAlreadyExistsError", "ReceiptIndexStaleError",
    "ReceiptDirectoryNotFoundError", "ReceiptInputError",
]

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) and _obj.__module__.startswith(__name__ + "."):
        _obj.__module__ = __name__
del _name, _obj
