from django.urls import path

from . import missing_views, trace_views, views

app_name = "replays"
urlpatterns = [
    path("runs/<str:run_id>/launch/<slug:button>/", views.replay_new, name="replay-new"),
    path("runs/<str:run_id>/regression/", views.regression_new, name="regression-new"),
    path("runs/<str:run_id>/scenario/", trace_views.run_scenario, name="run-scenario"),
    path("replays/", views.replay_list, name="replay-list"),
    path("replays/<int:pk>/", views.replay_detail, name="replay-detail"),
    path("replays/<int:pk>/comparison/", views.replay_comparison, name="replay-comparison"),
    path("replays/<int:pk>/missing/<int:index>/", views.missing_fixture, name="missing-fixture"),
    path("replays/<int:pk>/missing/<int:index>/copy-similar/", views.missing_copy_similar, name="missing-copy-similar"),
    path(
        "replays/<int:pk>/missing/<int:index>/copy-recorded/",
        missing_views.missing_copy_recorded,
        name="missing-copy-recorded",
    ),
    path(
        "replays/<int:pk>/missing/<int:index>/model-answer/",
        missing_views.missing_model_answer,
        name="missing-model-answer",
    ),
    path("replays/<int:pk>/missing/<int:index>/exclude-tool/", views.missing_exclude_tool, name="missing-exclude-tool"),
]
