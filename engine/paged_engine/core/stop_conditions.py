"""When a request stops generating: pure policy over the request's tokens and its sampling parameters."""

from __future__ import annotations

from .request import Request, RequestStatus


def check_stop(request: Request, max_model_len: int) -> bool:
    """Apply the stop conditions to the request's last token; on a stop, set its final status and return True.

    EOS (unless ``ignore_eos``) and ``stop_token_ids`` end the request once ``min_tokens`` tokens are out
    (the token that reaches ``min_tokens`` may itself stop it); then the length limits apply:
    ``max_tokens`` output tokens, or ``max_model_len`` tokens in all.
    """
    params = request.sampling_params
    token = request.all_token_ids[-1]
    num_output = request.num_output_tokens
    if num_output >= params.min_tokens and (
        (token == request.eos_token_id and not params.ignore_eos) or token in params.stop_token_ids
    ):
        request.status = RequestStatus.FINISHED_STOPPED
        request.stop_token_id = token
        return True
    max_tokens = params.max_tokens
    if (max_tokens is not None and num_output >= max_tokens) or len(request.all_token_ids) >= max_model_len:
        request.status = RequestStatus.FINISHED_LENGTH
        return True
    return False
