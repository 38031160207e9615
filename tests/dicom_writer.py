"""One synthetic MR DICOM writer for the tests (pydicom): a frame or a multi-frame cine with geometry."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def write_dicom(
    arr: np.ndarray,
    path,
    position: Sequence[float] = (0.0, 0.0, 0.0),
    orientation: Sequence[float] = (1, 0, 0, 0, 1, 0),
    spacing: Sequence[float] = (0.8, 0.9),
    thickness: float = 5.0,
    series: Optional[str] = None,
    study: Optional[str] = None,
    number: int = 1,
    trigger: Optional[float] = None,
    frames: bool = False,
) -> None:
    """Write ``arr`` ``(H, W)`` (or ``(F, H, W)`` with ``frames``) as 16-bit MONOCHROME2 MR DICOM at ``path``.

    ``spacing`` is DICOM's PixelSpacing (row spacing, column spacing, mm); ``orientation`` the
    ImageOrientationPatient row and column cosines; new UIDs where ``series`` / ``study`` are not given.
    """
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, MRImageStorage, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID = MRImageStorage, generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = MRImageStorage, meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID, ds.SeriesInstanceUID = study or generate_uid(), series or generate_uid()
    ds.Modality, ds.PatientID, ds.InstanceNumber = "MR", "X", number
    ds.ImagePositionPatient = [float(v) for v in position]
    ds.ImageOrientationPatient = [float(v) for v in orientation]
    ds.PixelSpacing, ds.SliceThickness = list(spacing), thickness
    if trigger is not None:
        ds.TriggerTime = trigger
    if frames:
        ds.NumberOfFrames = arr.shape[0]
    ds.Rows, ds.Columns = arr.shape[-2:]
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 0
    ds.PixelData = arr.astype(np.uint16).tobytes()
    ds.save_as(path, enforce_file_format=True)
