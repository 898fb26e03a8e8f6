"""configure() links classhub's pages from the hub's own pages in every run mode (z2jh too),
without taking a site's own page templates away."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from hub_ext.config import HUB_TEMPLATES, SERVICE_NAME, configure

pytestmark = pytest.mark.unit


def test_the_hub_nav_template_is_added_after_a_sites_own_templates():
    c = Config()
    c.JupyterHub.template_paths = ["/srv/site-templates"]
    configure(c, mode="kubernetes")
    assert c.JupyterHub.template_paths == ["/srv/site-templates", str(HUB_TEMPLATES)]
    assert (HUB_TEMPLATES / "page.html").is_file() and (HUB_TEMPLATES / "classhub-nav.html").is_file()
    configure(c, mode="kubernetes")  # configuring twice adds it once
    assert c.JupyterHub.template_paths.count(str(HUB_TEMPLATES)) == 1


def test_classhub_skips_the_hubs_authorize_page_and_is_in_the_services_menu():
    c = Config()
    configure(c, mode="local")
    service = next(s for s in c.JupyterHub.services if s["name"] == SERVICE_NAME)
    assert service["oauth_no_confirm"] is True and service["display"] is True
