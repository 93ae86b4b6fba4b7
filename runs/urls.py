from django.urls import path

from . import views

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="run-list"),
    path("runs/import/", views.run_import, name="run-import"),
    path("glossary/", views.glossary, name="glossary"),
    path("compare/", views.run_compare, name="run-compare"),
    path("search/events/", views.event_search, name="event-search"),
    path("runs/<str:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<str:run_id>/events/<str:event_id>/", views.event_detail, name="event-detail"),
    path("runs/<str:run_id>/blobs/<str:digest>/", views.blob_download, name="blob-download"),
    path("runs/<str:run_id>/export/", views.run_export, name="run-export"),
    path("runs/<str:run_id>/annotations/", views.run_annotate, name="run-annotate"),
    path("runs/<str:run_id>/approvals/<str:event_id>/", views.approval_surface, name="approval-surface"),
    path("approvals/pending/", views.approvals_pending, name="approvals-pending"),
]
