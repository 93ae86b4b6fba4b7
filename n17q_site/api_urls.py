"""/api/v1/: each app's API views under one prefix (DESIGN §8)."""

from django.urls import path

from fixtures_review import api as fixtures_api
from replays import api as replays_api
from runs import api as runs_api

urlpatterns = [
    path("runs/", runs_api.RunCollectionApi.as_view(), name="api-runs"),
    path("runs/<str:run_id>/", runs_api.RunDetailApi.as_view(), name="api-run"),
    path("runs/<str:run_id>/lineage/", runs_api.RunLineageApi.as_view(), name="api-run-lineage"),
    path("runs/<str:run_id>/findings/", runs_api.RunFindingsApi.as_view(), name="api-run-findings"),
    path("runs/<str:run_id>/bundle/", runs_api.RunBundleApi.as_view(), name="api-run-bundle"),
    path("runs/<str:run_id>/annotations/", runs_api.RunAnnotationsApi.as_view(), name="api-run-annotations"),
    path("runs/<str:run_id>/otlp/", runs_api.RunOtlpApi.as_view(), name="api-run-otlp"),
    path("runs/<str:run_id>/retries/", runs_api.RunRetriesApi.as_view(), name="api-run-retries"),
    path("runs/<str:run_id>/assessments/", replays_api.RunAssessmentsApi.as_view(), name="api-run-assessments"),
    path("runs/<str:run_id>/captures/", fixtures_api.RunCaptureApi.as_view(), name="api-run-captures"),
    path("runs/<str:run_id>/scenario/", replays_api.RunScenarioApi.as_view(), name="api-run-scenario"),
    path(
        "runs/<str:run_id>/scenario/launch/", replays_api.RunScenarioLaunchApi.as_view(), name="api-run-scenario-launch"
    ),
    path("approvals/pending/", runs_api.PendingApprovalsApi.as_view(), name="api-approvals-pending"),
    path("captures/", fixtures_api.CaptureCollectionApi.as_view(), name="api-captures"),
    path("replays/", replays_api.ReplayCollectionApi.as_view(), name="api-replays"),
    path("replays/<str:replay_id>/", replays_api.ReplayDetailApi.as_view(), name="api-replay"),
    path("replays/<str:replay_id>/missing/", replays_api.ReplayMissingApi.as_view(), name="api-replay-missing"),
    path(
        "replays/<str:replay_id>/missing/model-answer/",
        replays_api.ReplayModelAnswerApi.as_view(),
        name="api-replay-model-answer",
    ),
]
