"""The spawn form: the profiles a user may pick, how many are free now, and why one is disabled.

Rendered with Jinja2 (autoescaping on): profile names and descriptions come from admins, but
nothing reaches the page unescaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from jinja2 import Environment

from hub_ext.core.profiles import Offer

_TEMPLATE = """
<div class="classhub-profiles">
  {% for offer in offers %}
  {% set p = offer.profile %}
  <div class="form-check classhub-profile" data-profile="{{ p.slug }}">
    <input class="form-check-input" type="radio" name="profile" id="profile-{{ p.slug }}"
           value="{{ p.slug }}"
           {% if not offer.available %}disabled{% elif p.slug == selected %}checked{% endif %}>
    <label class="form-check-label" for="profile-{{ p.slug }}">
      <strong>{{ p.display_name }}</strong>
      <span class="classhub-free">
        {%- if offer.free is none %}available{% else %}{{ offer.free }} free now{% endif -%}
      </span>
      <br><small>{{ p.summary() }}</small>
      {% if p.description %}<br><small>{{ p.description }}</small>{% endif %}
      {% if not offer.available %}
      <br><small class="text-danger classhub-reason">{{ offer.reason }}</small>
      {% endif %}
    </label>
    {% if show_images and p.images|length > 1 %}
    <select class="form-select" name="image-{{ p.slug }}" aria-label="Image for {{ p.display_name }}">
      {% for image in p.images %}<option value="{{ image }}">{{ image }}</option>{% endfor %}
      {% for image in extra_images if image not in p.images %}
      <option value="{{ image }}">{{ image }} (used in your course)</option>
      {% endfor %}
    </select>
    {% endif %}
  </div>
  {% endfor %}
  {% if show_images and image_pattern %}
  <label for="classhub-custom-image">Other image (must match <code>{{ image_pattern }}</code>)</label>
  <input class="form-control" id="classhub-custom-image" name="custom_image" type="text">
  {% endif %}
</div>
"""

_env = Environment(autoescape=True)
_template = _env.from_string(_TEMPLATE)


def render_form(
    offers: Sequence[Offer],
    selected: str | None,
    show_images: bool,
    extra_images: Sequence[str] = (),
    image_pattern: str | None = None,
) -> str:
    """The HTML inside the hub's spawn ``<form>`` (the hub adds the form and submit button)."""
    first_available = next((o.profile.slug for o in offers if o.available), None)
    if selected not in {o.profile.slug for o in offers if o.available}:
        selected = first_available
    return _template.render(
        offers=offers, selected=selected, show_images=show_images,
        extra_images=list(extra_images), image_pattern=image_pattern,
    )


def options_from_form(formdata: dict[str, list[str]]) -> dict[str, str]:
    """Form fields -> ``user_options`` in the same shape a REST client sends."""
    options: dict[str, str] = {}
    profile = (formdata.get("profile") or [""])[0]
    if profile:
        options["profile"] = profile
        custom = (formdata.get("custom_image") or [""])[0].strip()
        image = custom or (formdata.get(f"image-{profile}") or [""])[0]
        if image:
            options["image"] = image
    return options
