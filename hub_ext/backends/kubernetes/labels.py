"""Labels classhub puts on the Kubernetes objects it makes, in a module of their own.

Why: both the job backend (`jobs.py`, which makes the objects) and the live views (`informer.py`,
which recognise a job's pods in a watch) read them; the job backend also keeps its live view, so
the names live below both instead of one importing the other in a circle.
"""

#: A job's objects and pods carry their job id under this label.
JOB_LABEL = "classhub.io/job"

#: A user server's pod names the volume that is its owner's home under this annotation
#: (spawner.kube.ClasshubKubeSpawner sets it): the home sizes read that volume's size from the
#: kubelet (hub_ext.backends.kubernetes.homes).
HOME_VOLUME_ANNOTATION = "classhub.io/home-volume"
