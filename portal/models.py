"""The portal has no models of its own: the audit log is ``core.models.AuditEvent``."""
