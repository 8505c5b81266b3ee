from django.db import models
from django.utils.translation import gettext_lazy as _


class TenantKind(models.TextChoices):
    ORGANISATION = "organisation", _("Organisation")
    DEPARTMENT = "department", _("Department")
    CLASS = "class", _("Class")
    PROJECT = "project", _("Project")


# Which kinds may sit under which: a school holds departments (and projects), a department
# holds classes and projects. Classes and projects are leaves.
ALLOWED_PARENT_KINDS: dict[str, tuple[str | None, ...]] = {
    TenantKind.ORGANISATION: (None,),
    TenantKind.DEPARTMENT: (TenantKind.ORGANISATION, TenantKind.DEPARTMENT),
    TenantKind.CLASS: (TenantKind.DEPARTMENT, TenantKind.ORGANISATION),
    TenantKind.PROJECT: (TenantKind.DEPARTMENT, TenantKind.ORGANISATION),
}


class Role(models.TextChoices):
    ADMIN = "admin", _("Admin")
    TEACHER = "teacher", _("Teacher")
    TA = "ta", _("Teaching assistant")
    STUDENT = "student", _("Student")


# Roles that manage a tenant's subtree (members, quotas, grants) and see all of its objects.
MANAGING_ROLES = (Role.ADMIN, Role.TEACHER, Role.TA)
# Roles that may change the tree itself and quotas.
ADMIN_ROLES = (Role.ADMIN,)
