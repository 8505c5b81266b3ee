"""Every change to tenants, memberships, quotas, users and tokens goes through here.

Each function runs in one transaction, takes the acting user as ``actor`` and writes an
audit row. Errors a person can fix raise ``ValidationError`` naming the field; the API turns
them into 400 responses and forms into form errors.

One module per topic; callers keep importing from ``tenants.services``:

- ``tree``: the tenant tree (create, update, move, delete, close ended terms)
- ``members``: memberships and roles
- ``quotas``: quota limits and the ledger admission charges (reserve / release)
- ``roster_import``: users and memberships from a roster CSV
- ``preferences``: a person's own display name, language and time zone
- ``tokens``: personal API tokens
- ``ssh_keys``: SSH public keys for the SSH gateway
- ``sign_in_links``: one-time set-your-password links for people without a password
"""

from tenants.services.members import _forget_access, remove_membership, set_membership
from tenants.services.preferences import PREFERENCE_FIELDS, update_preferences
from tenants.services.quotas import (
    QUOTA_LIMIT_FIELDS,
    QuotaExceeded,
    QuotaSnapshot,
    QuotaUpdate,
    _apply,
    _chain,
    _levels,
    check_quota,
    lock_chains,
    quota_over_use,
    quota_snapshot,
    release,
    reserve,
    set_quota,
)
from tenants.services.roster_import import RosterRejected, RosterResult, import_roster
from tenants.services.sign_in_links import (
    SignInLink,
    issue_sign_in_links,
    link_candidates,
    link_recipients,
    needs_sign_in_link,
    send_sign_in_links,
    set_password_from_link,
)
from tenants.services.ssh_keys import add_ssh_key, parse_public_key, remove_ssh_key, touch_ssh_key
from tenants.services.tokens import (
    TOKEN_PREFIX,
    create_api_token,
    hash_token,
    revoke_api_token,
    touch_api_token,
)
from tenants.services.tree import (
    TENANT_FIELDS,
    close_ended_terms,
    create_tenant,
    delete_tenant,
    move_tenant,
    update_tenant,
)

__all__ = [
    "PREFERENCE_FIELDS",
    "QUOTA_LIMIT_FIELDS",
    "TENANT_FIELDS",
    "TOKEN_PREFIX",
    "QuotaExceeded",
    "QuotaSnapshot",
    "QuotaUpdate",
    "RosterRejected",
    "RosterResult",
    "SignInLink",
    "_apply",
    "_chain",
    "_forget_access",
    "_levels",
    "add_ssh_key",
    "check_quota",
    "close_ended_terms",
    "create_api_token",
    "create_tenant",
    "delete_tenant",
    "hash_token",
    "import_roster",
    "issue_sign_in_links",
    "link_candidates",
    "link_recipients",
    "lock_chains",
    "move_tenant",
    "needs_sign_in_link",
    "parse_public_key",
    "quota_over_use",
    "quota_snapshot",
    "release",
    "remove_membership",
    "remove_ssh_key",
    "reserve",
    "revoke_api_token",
    "send_sign_in_links",
    "set_membership",
    "set_password_from_link",
    "set_quota",
    "touch_api_token",
    "touch_ssh_key",
    "update_preferences",
    "update_tenant",
]
