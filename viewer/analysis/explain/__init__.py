"""Per-word maps of what a caption word USED, beside where the model attended.

The data flow, one module each:
- `pipeline.py`: one photo + model + forced caption; hide parts of the photo (imputed by
  `imputers.py`: the blur, or ROAD's noisy linear imputation) -> every word's log-prob;
- `methods/`: one file per method over `methods/base.py`'s `Method`, and the registry
  (`methods/__init__.py`): attention, occlusion (and a finer variant), Grad-CAM, relevancy
  (Chefer et al., transformer only), superpixel ablation and KernelSHAP (SLIC segments);
- `maps.py`: every map on the 14x14 grid, clamped at 0 and summing to 1 (regions projected,
  other grids and superpixels pooled);
- `explanation.py`: `explain` runs the asked methods; `explained_trace` draws a method's maps
  in any view, as attention is drawn;
- `sanity.py`: the cascading randomisation check.
The metrics are apart: pixel_faithfulness.py (MoRF, LeRF, insertion under each imputer),
explain_eval.py (`evaluate --explain`).

sat-hard (stochastic hard attention) is explained through its soft EXPECTATION (the context is
sum_i alpha_i a_i instead of a drawn cell), so maps are smooth in the photo and need no seeds.
Models that read precomputed features, or an imported grid encoder without a photo-space input,
show attention only.
"""
from .explanation import (DEFAULT_METHODS, FINE_SIDE, METHOD_LABELS, METHODS, Explanation, available_methods,
                          check_methods, explain, explained_trace)
from .imputers import BLUR_SIGMA, IMPUTERS, noisy_linear
from .maps import attention_grid, normalise, pool, project_regions, to_grid
from .methods import REGISTRY, Method, gradcam_maps, relevancy_maps, segments
from .pipeline import BATCH, Pipeline
from .sanity import Stage, decoder_layers, randomisation_check, spearman

__all__ = ["DEFAULT_METHODS", "FINE_SIDE", "METHOD_LABELS", "METHODS", "Explanation", "available_methods",
           "check_methods", "explain", "explained_trace", "BLUR_SIGMA", "IMPUTERS", "noisy_linear", "attention_grid",
           "normalise", "pool", "project_regions", "to_grid", "REGISTRY", "Method", "gradcam_maps", "relevancy_maps",
           "segments", "BATCH", "Pipeline", "Stage", "decoder_layers", "randomisation_check", "spearman"]
