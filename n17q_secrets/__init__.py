"""Secret scanning, Django-free: the field's reference rules (`reference`) and how every text is scanned and
masked before it is stored (`scanning`)."""
