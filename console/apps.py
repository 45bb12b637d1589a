from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    label = "console"
    verbose_name = "Console"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed

        from console import login_guard

        # Every console login, failed login, lockout and logout is an audit row (console.login_guard).
        user_logged_in.connect(login_guard.on_logged_in, dispatch_uid="console.login_guard.logged_in")
        user_login_failed.connect(login_guard.on_login_failed, dispatch_uid="console.login_guard.login_failed")
        user_logged_out.connect(login_guard.on_logged_out, dispatch_uid="console.login_guard.logged_out")
