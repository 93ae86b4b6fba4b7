"""The request type of views that read `request.htmx` (django-htmx's middleware sets it on every request)."""

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails
