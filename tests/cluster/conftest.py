"""tests/cluster: the box (docs/CLUSTER.md) runs only where asked, `make test-cluster`
(SMPI_BOX_TESTS=1): it needs root, takes a few minutes and has a CI step of its own."""
import os

collect_ignore = [] if os.environ.get("SMPI_BOX_TESTS") else ["test_box.py"]
