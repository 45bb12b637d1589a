"""Projects in the console: the list, importing an uploaded file, binding a file under the root, export."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from projects.files import PathOutsideRoot
from projects.models import Project
from projects.services import ProjectRefused, do_bind_project, do_import_project, export_bytes

MAX_UPLOAD_BYTES = 50 * 1024 * 1024


class RegisterForm(forms.Form):
    slug = forms.SlugField(max_length=100, help_text="Short name used by tools and URLs, e.g. line-3-press.")
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the file's project name.")


class ImportForm(RegisterForm):
    file = forms.FileField(help_text="A PLCopen TC6 2.01 XML file; it is copied under the projects root.")


class BindForm(RegisterForm):
    path = forms.CharField(
        max_length=500, help_text="A file inside FORGE_PROJECTS_ROOT (absolute, or relative to the root)."
    )


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "path", "accepted_revision", "updated_at", "export_link")
    search_fields = ("slug", "name", "path")
    readonly_fields = ("slug", "path", "accepted_revision", "fingerprint", "created_at", "updated_at")
    fields = ("name", *readonly_fields)
    change_list_template = "admin/projects/project/change_list.html"

    def has_add_permission(self, request) -> bool:
        return False  # projects come in through import or bind, which check the file

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # the audit log and drafts refer to projects

    @admin.display(description="export")
    def export_link(self, project: Project) -> str:
        return format_html('<a href="{}">download</a>', reverse("admin:projects_project_export", args=[project.pk]))

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("import/", wrap(self.import_view), name="projects_project_import"),
            path("bind/", wrap(self.bind_view), name="projects_project_bind"),
            path("<int:pk>/export/", wrap(self.export_view), name="projects_project_export"),
            *super().get_urls(),
        ]

    def import_view(self, request: HttpRequest):
        return self._register_view(request, ImportForm, "Import a project file", self._import)

    def bind_view(self, request: HttpRequest):
        return self._register_view(request, BindForm, "Bind a file under the projects root", self._bind)

    def _import(self, request: HttpRequest, form: ImportForm) -> Project:
        upload = form.cleaned_data["file"]
        if upload.size > MAX_UPLOAD_BYTES:
            raise ProjectRefused(f"the file is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB.")
        data = upload.read()
        return do_import_project(
            data,
            slug=form.cleaned_data["slug"],
            name=form.cleaned_data["name"],
            acting_user=request.user.get_username(),
        )

    def _bind(self, request: HttpRequest, form: BindForm) -> Project:
        return do_bind_project(
            form.cleaned_data["path"],
            slug=form.cleaned_data["slug"],
            name=form.cleaned_data["name"],
            acting_user=request.user.get_username(),
        )

    def _register_view(self, request: HttpRequest, form_class, title: str, register):
        if not self.has_change_permission(request):
            return HttpResponseRedirect(reverse("admin:index"))
        form = form_class(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            try:
                project = register(request, form)
            except (ProjectRefused, PathOutsideRoot) as exc:
                form.add_error(None, str(exc))
            else:
                self.message_user(request, f"Registered {project} at revision 1.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:projects_project_changelist"))
        context = {**self.admin_site.each_context(request), "title": title, "form": form, "opts": self.model._meta}
        return TemplateResponse(request, "admin/projects/project/register.html", context)

    def export_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        project = get_object_or_404(Project, pk=pk)
        if not self.has_view_permission(request, project):
            return HttpResponseRedirect(reverse("admin:index"))
        response = HttpResponse(export_bytes(project), content_type="application/xml")
        response["Content-Disposition"] = f'attachment; filename="{project.slug}.xml"'
        return response
