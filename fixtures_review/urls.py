from django.urls import path

from . import views

app_name = "fixtures"
urlpatterns = [
    path("review/", views.recording_queue, name="queue"),
    path("review/record-policy/", views.record_policy, name="record-policy"),
    path("review/<str:public_id>/", views.recording_detail, name="recording"),
    path("review/<str:public_id>/<str:action>/", views.recording_action, name="action"),
    path("review/<str:public_id>/body/<str:part>/", views.body_download, name="body"),
    path("runs/<str:run_id>/stage-results/", views.run_results_stage, name="run-results-stage"),
    path("scenarios/", views.scenario_list, name="scenarios"),
    path("scenarios/<str:name>@<int:version>/", views.scenario_detail, name="scenario"),
]
