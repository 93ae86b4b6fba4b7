from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required, login_required
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path
from django.views.decorators.cache import cache_control
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from accounts.permissions import role_not_required
from accounts.signin import ThrottledLoginView

from .health import HealthApi


@login_not_required
@cache_control(max_age=86400)
def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for /favicon.ico on pages that name no icon (JSON, the admin): the console's icon, not a 404."""
    return HttpResponseRedirect(static("favicon.svg"))


urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
    path("login/", login_not_required(ThrottledLoginView.as_view()), name="login"),
    path("logout/", role_not_required(auth_views.LogoutView.as_view()), name="logout"),
    path("admin/", admin.site.urls),
    # For load balancers and health checks: no sign-in (details only for a signed-in user; n17q_site/health.py).
    path("health/", login_not_required(HealthApi.as_view()), name="health"),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The browsable docs are a page for people: an anonymous visitor is sent to sign in, not refused. The split
    # view serves Swagger UI's start-up script as a file of its own (`?script`), so the CSP needs no inline script.
    path("api/v1/docs/", login_required(SpectacularSwaggerSplitView.as_view(url_name="api-schema")), name="api-docs"),
    path("api/v1/", include("n17q_site.api_urls")),
    path("", include("fixtures_review.urls")),
    path("", include("replays.urls")),
    path("", include("runs.urls")),
    # OTLP/HTTP at the root (`/v1/traces`, where exporters send), and the received traces' pages.
    path("", include("otlp_receiver.urls")),
]
