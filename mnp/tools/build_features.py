"""``python -m mnp.tools.build_features``: build (or resume) the CIFAR10-C Inception-v3 feature cache that
``dataset=cifar10c`` reads (the extraction itself: :mod:`datamodules.feature_cache`; the settings:
conf/features/cifar10c.yaml)."""

from __future__ import annotations

from datamodules.feature_cache import build_cifar10c


def main() -> None:
    import hydra

    from mnp.cli.cli import run_guarded
    from mnp.cli.resolvers import register_resolver

    register_resolver()
    hydra.main(version_base="1.3", config_path="../../conf", config_name="features/cifar10c")(
        lambda cfg: run_guarded(build_cifar10c, cfg)
    )()


if __name__ == "__main__":
    main()
