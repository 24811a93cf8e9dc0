"""Hydra finds the toy family's model option (toy_family/conf/model/toy.yaml) the way an
installed package ships config options: a SearchPathPlugin in the `hydra_plugins` namespace,
discovered in every process (the login, a sweep's points, torchrun's ranks)."""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class ToyFamilySearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="toy-family", path="pkg://toy_family.conf")
