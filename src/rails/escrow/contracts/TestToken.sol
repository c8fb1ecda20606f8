// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

/// A 6-decimal token for the sandbox chain (micro units map one to one). Anyone may mint: sandbox only.
contract TestToken is ERC20 {
    constructor() ERC20("node-svc Test USD", "USDC") {}

    function decimals() public pure override returns (uint8) {
        return 6;
    }

    function mint(address to, uint256 amount) external {
        _mint(to, amount);
    }
}
