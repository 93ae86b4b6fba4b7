from django.urls import path

from fixtures_review import api as fixtures_api

from . import api

urlpatterns = [
    path("runs/", api.RunCollectionApi.as_view(), name="api-runs"),
    path("runs/<str:run_id>/", api.RunDetailApi.as_view(), name="api-run"),
    path("runs/<str:run_id>/lineage/", api.RunLineageApi.as_view(), name="api-run-lineage"),
    path("captures/", fixtures_api.CaptureCollectionApi.as_view(), name="api-captures"),
]
