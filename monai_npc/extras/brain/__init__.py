"""2-D brain MRI breadth demo (paper Appendix "Deformation breadth", OASIS 2-D) on six real T1 slices.

- :mod:`.data`: the slices r16 ... r85 and the r16 / r85 landmark curves (the ``brain2d`` folder, :func:`.data.default_data_dir`);
- :mod:`.augment`: random affine + elastic perturbations for training;
- :mod:`.landmarks`: moving curve points through a field, mean symmetric / Hausdorff distances;
- :mod:`.figures`: the ODE-step timelapse; :mod:`.demo`: training, evaluation, figures, metrics.
"""
