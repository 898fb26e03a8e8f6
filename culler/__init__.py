"""The classhub idle culler service: facts from the hub, the store and the servers; decisions
from hub_ext.core.culling; culls through the hub API. See culler.app."""
