from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required, login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

urlpatterns = [
    path("login/", login_not_required(auth_views.LoginView.as_view()), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The browsable docs are a page for people: an anonymous visitor is sent to sign in, not refused.
    path("api/v1/docs/", login_required(SpectacularSwaggerView.as_view(url_name="api-schema")), name="api-docs"),
    path("api/v1/", include("runs.api_urls")),
    path("", include("fixtures_review.urls")),
    path("", include("runs.urls")),
]
