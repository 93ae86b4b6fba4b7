"""Keep the role groups in step with the permissions the apps declare, after every migrate."""

from __future__ import annotations

from typing import Any


def ensure_roles(**kwargs: Any) -> None:
    from django.contrib.auth.models import Group, Permission

    from .roles import ROLE_PERMISSIONS

    for role, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        wanted = []
        for dotted in perms:
            app_label, codename = dotted.split(".")
            perm = Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()
            if perm is not None:  # a permission of an app not migrated yet is granted on its own migrate
                wanted.append(perm)
        group.permissions.add(*wanted)
