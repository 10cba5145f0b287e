"""torchvision's side of the augmentation tests: the image a sample's draws
give when torchvision applies them to the PIL image, in the order conveyord
documents (config/README.md, "Augmentation ops"): RandomResizedCrop (or
Resize + CenterCrop) -> RandomCrop(padding) -> horizontal flip -> vertical
flip -> ColorJitter -> RandomGrayscale -> GaussianBlur -> TrivialAugmentWide.

`draws` is the JSON object of an `augment` field (or transform_tool's trace
flattened the same way): "crop" [top, left, height, width] or "window"
[resized height, resized width, top, left], "flip", "vflip", "grayscale",
and, for the ops that are on, "pad", "jitter", "blur", "trivial_augment".
"""

import numpy as np
import torchvision.transforms.functional as F
from torchvision.transforms import InterpolationMode
from torchvision.transforms.autoaugment import _apply_op


def reference(pil, draws, size, padding=0, padding_mode="constant", fill=0, blur_kernel=None):
    """HWC uint8 array: `pil` (an RGB PIL image) through `draws` at `size` (h, w)."""
    h, w = size
    if "crop" in draws:
        top, left, ch, cw = draws["crop"]
        img = F.resized_crop(pil, top, left, ch, cw, [h, w], antialias=True)
    else:
        rh, rw, top, left = draws["window"]
        img = F.resize(pil, [rh, rw], antialias=True)
        img = F.crop(img, top, left, h, w)
    if padding:
        pad_top, pad_left = draws["pad"]
        img = F.pad(img, padding, fill=fill, padding_mode=padding_mode)
        img = F.crop(img, pad_top, pad_left, h, w)
    if draws.get("flip"):
        img = F.hflip(img)
    if draws.get("vflip"):
        img = F.vflip(img)
    jitter = draws.get("jitter")
    if jitter and jitter["applied"]:
        adjust = {0: ("brightness", F.adjust_brightness, 1), 1: ("contrast", F.adjust_contrast, 1),
                  2: ("saturation", F.adjust_saturation, 1), 3: ("hue", F.adjust_hue, 0)}
        for fn in jitter["order"]:
            name, op, identity = adjust[fn]
            if jitter[name] != identity:
                img = op(img, jitter[name])
    if draws.get("grayscale"):
        img = F.rgb_to_grayscale(img, num_output_channels=3)
    blur = draws.get("blur")
    if blur and blur["applied"]:
        img = F.gaussian_blur(img, list(blur_kernel), [blur["sigma"], blur["sigma"]])
    trivial = draws.get("trivial_augment")
    if trivial:
        img = _apply_op(img, trivial["op"], trivial["magnitude"], InterpolationMode.NEAREST, None)
    return np.asarray(img.convert("RGB"), dtype=np.uint8)


def close_to_torch(ours, entry):
    """torch.linspace's float32 entry, to within a few units in the last place:
    torch's own values depend on the vector width its CPU kernel runs at, so
    the daemon computes them as torch's scalar loop does (the pixels are
    compared given the daemon's value)."""
    want = np.float32(float(entry))
    return abs(np.float32(ours) - want) <= 8 * np.spacing(np.abs(want))
