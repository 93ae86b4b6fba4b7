from django.urls import path

from . import views

app_name = "otlp"
urlpatterns = [
    # OTLP/HTTP's default path for traces, at the site's root as exporters expect it (OTEL_EXPORTER_OTLP_ENDPOINT
    # is the site's address; the exporter appends /v1/traces).
    path("v1/traces", views.TraceExportApi.as_view(), name="export-traces"),
    path("traces/", views.trace_list, name="trace-list"),
    path("traces/<str:trace_id>/", views.trace_detail, name="trace-detail"),
    path("traces/<str:trace_id>/flush/", views.trace_flush, name="trace-flush"),
]
