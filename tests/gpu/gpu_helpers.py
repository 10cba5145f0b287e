"""Helpers of the GPU tests shared by the pytest files (through conftest.py) and the second
client process (device_client.py): whether a CUDA device is there, a GPU's UUID, and views
of device batches as torch tensors. Imports torch lazily: importable without it.
"""


def gpu_available():
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0


def gpu_uuid(index=0):
    """"GPU-xxxxxxxx-..." of CUDA device `index` as this process numbers them."""
    import torch
    return "GPU-%s" % torch.cuda.get_device_properties(index).uuid


def as_torch(images):
    """A torch CUDA tensor viewing a device batch's images (torch tensor, DLPack or
    __cuda_array_interface__), without a copy."""
    import torch
    if isinstance(images, torch.Tensor):
        return images
    if hasattr(images, "__dlpack__"):
        return torch.from_dlpack(images)
    return torch.as_tensor(images, device="cuda")


def host_bytes(t):
    """The bytes of a CUDA tensor, on the host (bfloat16 viewed as int16: numpy has none)."""
    import torch
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.cpu().numpy()


def bfloat16_of(f32):
    """float32 numpy -> bfloat16 bits (int16), round to nearest even: what the GPU's
    conversion of the same float32 must give."""
    import torch
    return torch.from_numpy(f32).to(torch.bfloat16).view(torch.int16).numpy()
