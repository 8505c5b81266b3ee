from django.contrib.auth import views as auth_views
from django.urls import path

from tenants import views
from tenants.forms import CampusAuthenticationForm

urlpatterns = [
    path("notices/read/", views.read_notices, name="notices-read"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            redirect_authenticated_user=True, authentication_form=CampusAuthenticationForm
        ),
        name="login",
    ),
    path("cas/login/", views.CampusCASLoginView.as_view(), name="cas_ng_login"),
    path("cas/logout/", views.CampusCASLogoutView.as_view(), name="cas_ng_logout"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path(
        "account/password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("account/", views.preferences, name="preferences"),
    path("account/language/", views.choose_language, name="choose-language"),
    path("account/tokens/", views.tokens, name="tokens"),
    path("account/tokens/<int:pk>/revoke/", views.revoke_token, name="revoke-token"),
    path("account/ssh-keys/", views.ssh_keys, name="ssh-keys"),
    path("account/ssh-keys/<int:pk>/remove/", views.remove_ssh_key, name="remove-ssh-key"),
    path("roster/import/", views.roster_import, name="roster-import"),
    path("roster/sample.<str:kind>", views.roster_sample, name="roster-sample"),
    path("roster/sign-in-links/", views.sign_in_links, name="sign-in-links"),
    path(
        "account/welcome/<uidb64>/<token>/",
        views.SignInLinkView.as_view(),
        name="sign-in-link",
    ),
]
