from django.urls import path

from . import replay_views, views

app_name = "runs"
urlpatterns = [
    path("", views.run_list, name="run-list"),
    path("runs/import/", views.run_import, name="run-import"),
    path("runs/<str:run_id>/", views.run_detail, name="run-detail"),
    path("runs/<str:run_id>/launch/<slug:button>/", replay_views.replay_new, name="replay-new"),
    path("runs/<str:run_id>/regression/", replay_views.regression_new, name="regression-new"),
    path("replays/", replay_views.replay_list, name="replay-list"),
    path("replays/<int:pk>/", replay_views.replay_detail, name="replay-detail"),
    path("replays/<int:pk>/comparison/", replay_views.replay_comparison, name="replay-comparison"),
    path("replays/<int:pk>/missing/<int:index>/", replay_views.missing_fixture, name="missing-fixture"),
    path(
        "replays/<int:pk>/missing/<int:index>/copy-similar/",
        replay_views.missing_copy_similar,
        name="missing-copy-similar",
    ),
    path(
        "replays/<int:pk>/missing/<int:index>/exclude-tool/",
        replay_views.missing_exclude_tool,
        name="missing-exclude-tool",
    ),
]
