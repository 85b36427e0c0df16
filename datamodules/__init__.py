"""LightningDataModules for multi-view feature datasets."""

from datamodules.base import MultiViewDataModule, RawData, TensorDataModule
from datamodules.errors import DataError

__all__ = ["DataError", "MultiViewDataModule", "RawData", "TensorDataModule"]
