"""Secret scanning, Django-free: the field's reference rules (`reference`), the kinds of credential no single rule set
covers (`field_classes`), and how every text is scanned and masked before it is stored (`scanning`)."""
